#pragma once
// PeerProcess: a child process (the UCX peer) spoken to line by line over
// its stdin/stdout; killed and reaped by the destructor if still running.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tandem::kvtransfer::testing {

class PeerProcess {
 public:
  // Starts `argv[0]` with `argv`; the child's stderr is ours.
  static absl::StatusOr<std::unique_ptr<PeerProcess>> Start(const std::vector<std::string>& argv) {
    signal(SIGPIPE, SIG_IGN);  // a dead peer's stdin must not kill us
    int to_child[2];
    int from_child[2];
    if (pipe2(to_child, O_CLOEXEC) != 0 || pipe2(from_child, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
    }
    std::vector<char*> args;
    for (const std::string& a : argv) {
      args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
    }
    if (pid == 0) {  // child: only async-signal-safe calls until exec
      dup2(to_child[0], 0);
      dup2(from_child[1], 1);
      execv(args[0], args.data());
      _exit(127);
    }
    close(to_child[0]);
    close(from_child[1]);
    auto p = std::unique_ptr<PeerProcess>(new PeerProcess);
    p->pid_ = pid;
    p->in_ = to_child[1];
    p->out_ = from_child[0];
    p->name_ = absl::StrJoin(argv, " ");
    return p;
  }

  ~PeerProcess() {
    if (in_ >= 0) {
      close(in_);  // end of input: the peer exits
    }
    if (pid_ > 0) {
      const absl::Time deadline = absl::Now() + absl::Seconds(10);
      while (waitpid(pid_, nullptr, WNOHANG) == 0) {
        if (absl::Now() > deadline) {
          Kill();
          break;
        }
        absl::SleepFor(absl::Milliseconds(5));
      }
    }
    if (out_ >= 0) {
      close(out_);
    }
  }

  pid_t pid() const { return pid_; }

  absl::Status Send(const std::string& line) {
    const std::string data = line + "\n";
    if (write(in_, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
      return absl::UnavailableError(absl::StrCat("write to ", name_, ": ", strerror(errno)));
    }
    return absl::OkStatus();
  }

  // The next line the peer prints, without the newline.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout = absl::Seconds(60)) {
    const absl::Time deadline = absl::Now() + timeout;
    while (true) {
      const size_t nl = buffer_.find('\n');
      if (nl != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        return line;
      }
      const int64_t left_ms = absl::ToInt64Milliseconds(deadline - absl::Now());
      if (left_ms <= 0) {
        return absl::DeadlineExceededError(
            absl::StrCat("no line from ", name_, " within ", absl::FormatDuration(timeout)));
      }
      pollfd pfd{out_, POLLIN, 0};
      if (poll(&pfd, 1, static_cast<int>(left_ms)) <= 0) {
        continue;
      }
      char buf[4096];
      const ssize_t n = read(out_, buf, sizeof(buf));
      if (n <= 0) {
        return absl::UnavailableError(absl::StrCat(name_, " closed its output"));
      }
      buffer_.append(buf, n);
    }
  }

  absl::StatusOr<std::string> Ask(const std::string& line,
                                  absl::Duration timeout = absl::Seconds(60)) {
    if (absl::Status s = Send(line); !s.ok()) {
      return s;
    }
    return ReadLine(timeout);
  }

  void Kill() {
    if (pid_ > 0) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
      pid_ = -1;
    }
  }

 private:
  PeerProcess() = default;

  pid_t pid_ = -1;
  int in_ = -1;
  int out_ = -1;
  std::string name_;
  std::string buffer_;
};

}  // namespace tandem::kvtransfer::testing
