#pragma once
// A real binary started as a child process for the router integration tests:
// its stdout is read for the "READY ..." line the servers print, its stderr
// goes to a log file (shown on failure); killed and reaped by the destructor.

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tandem::router::testing {

class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(const std::vector<std::string>& argv,
                                                             const std::string& log_path) {
    signal(SIGPIPE, SIG_IGN);
    int out[2];
    if (pipe2(out, O_CLOEXEC) != 0) {
      return absl::InternalError(absl::StrCat("pipe2: ", strerror(errno)));
    }
    const int log_fd = open(log_path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    std::vector<char*> args;
    for (const std::string& a : argv) {
      args.push_back(const_cast<char*>(a.c_str()));
    }
    args.push_back(nullptr);
    const pid_t pid = fork();
    if (pid < 0) {
      return absl::InternalError(absl::StrCat("fork: ", strerror(errno)));
    }
    if (pid == 0) {
      dup2(out[1], 1);
      if (log_fd >= 0) {
        dup2(log_fd, 2);
      }
      execv(args[0], args.data());
      _exit(127);
    }
    close(out[1]);
    if (log_fd >= 0) {
      close(log_fd);
    }
    auto p = std::unique_ptr<ChildProcess>(new ChildProcess);
    p->pid_ = pid;
    p->out_ = out[0];
    p->name_ = argv[0].substr(argv[0].find_last_of('/') + 1);
    p->log_path_ = log_path;
    return p;
  }

  ~ChildProcess() {
    if (pid_ > 0 && !exited_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
    if (out_ >= 0) {
      close(out_);
    }
  }

  // Reads stdout until a line starting with `prefix`; returns it.
  absl::StatusOr<std::string> WaitForLine(const std::string& prefix,
                                          absl::Duration timeout = absl::Seconds(60)) {
    const absl::Time give_up = absl::Now() + timeout;
    while (absl::Now() < give_up) {
      size_t nl;
      while ((nl = buffer_.find('\n')) != std::string::npos) {
        std::string line = buffer_.substr(0, nl);
        buffer_.erase(0, nl + 1);
        output_ += line + "\n";
        if (absl::StartsWith(line, prefix)) {
          return line;
        }
      }
      pollfd pfd{out_, POLLIN, 0};
      if (poll(&pfd, 1, 100) > 0) {
        char buf[4096];
        const ssize_t n = read(out_, buf, sizeof(buf));
        if (n <= 0) {
          return absl::UnavailableError(absl::StrCat(name_, " closed stdout before '", prefix,
                                                     "'; stderr:\n", Log()));
        }
        buffer_.append(buf, n);
      }
    }
    return absl::DeadlineExceededError(
        absl::StrCat(name_, ": no '", prefix, "' line within ", absl::FormatDuration(timeout),
                     "; stdout so far:\n", output_, "stderr:\n", Log()));
  }

  // "key=value" from a READY line.
  static int IntField(const std::string& line, const std::string& key) {
    for (absl::string_view kv : absl::StrSplit(line, ' ')) {
      if (absl::ConsumePrefix(&kv, key + "=")) {
        int v = 0;
        if (absl::SimpleAtoi(kv, &v)) {
          return v;
        }
      }
    }
    return -1;
  }

  void Signal(int sig) {
    if (!exited_) {
      kill(pid_, sig);
    }
  }
  // Waits for exit; returns the wait status or -1 on timeout.
  int Wait(absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (absl::Now() < give_up) {
      int status = 0;
      if (waitpid(pid_, &status, WNOHANG) == pid_) {
        exited_ = true;
        return status;
      }
      absl::SleepFor(absl::Milliseconds(10));
    }
    return -1;
  }
  std::string Log() const {
    std::ifstream in(log_path_);
    std::stringstream ss;
    ss << in.rdbuf();
    std::string s = ss.str();
    return s.size() > 4000 ? s.substr(s.size() - 4000) : s;
  }
  const std::string& output() const { return output_; }
  pid_t pid() const { return pid_; }

 private:
  ChildProcess() = default;
  pid_t pid_ = -1;
  int out_ = -1;
  bool exited_ = false;
  std::string name_;
  std::string log_path_;
  std::string buffer_;
  std::string output_;
};

}  // namespace tandem::router::testing
