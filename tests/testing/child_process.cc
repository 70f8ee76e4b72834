#include "tests/testing/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "absl/time/clock.h"
#include "common/base/status_macros.h"

extern char** environ;

namespace tandem::testing {
namespace {

absl::Status Errno(absl::string_view what) {
  return absl::InternalError(absl::StrCat(what, ": ", std::strerror(errno)));
}

void CloseIfOpen(int fd) {
  if (fd >= 0) {
    close(fd);
  }
}

// This process's environment with `extra` ("NAME=value") replacing or adding
// entries.
std::vector<std::string> Environment(const std::vector<std::string>& extra) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const absl::string_view entry(*e);
    const absl::string_view name = entry.substr(0, entry.find('='));
    const bool replaced = std::any_of(extra.begin(), extra.end(), [&](const std::string& x) {
      return absl::StartsWith(x, absl::StrCat(name, "="));
    });
    if (!replaced) {
      env.emplace_back(entry);
    }
  }
  env.insert(env.end(), extra.begin(), extra.end());
  return env;
}

std::vector<char*> Pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) {
    out.push_back(s.data());
  }
  out.push_back(nullptr);
  return out;
}

}  // namespace

absl::StatusOr<std::unique_ptr<ChildProcess>> ChildProcess::Start(ChildOptions options) {
  std::unique_ptr<ChildProcess> p(new ChildProcess());
  RETURN_IF_ERROR(p->Spawn(std::move(options)));
  return p;
}

absl::Status ChildProcess::Spawn(ChildOptions options) {
  if (options.argv.empty()) {
    return absl::InvalidArgumentError("ChildProcess: empty argv");
  }
  signal(SIGPIPE, SIG_IGN);  // a dead child's stdin must not kill us
  static std::atomic<int> counter{0};
  const std::string& binary = options.argv[0];
  name_ = absl::StrCat(binary.substr(binary.rfind('/') + 1), "#", counter++);

  int out[2] = {-1, -1};
  int in[2] = {-1, -1};
  int log_fd = -1;
  auto close_all = [&] {
    for (int fd : {out[0], out[1], in[0], in[1], log_fd}) {
      CloseIfOpen(fd);
    }
  };
  if (pipe2(out, O_CLOEXEC) != 0) {
    return Errno("pipe2");
  }
  if (options.stdin_pipe && pipe2(in, O_CLOEXEC) != 0) {
    absl::Status s = Errno("pipe2");
    close_all();
    return s;
  }
  if (!options.stderr_to_stdout && !options.log_dir.empty()) {
    log_path_ = absl::StrCat(options.log_dir, "/", name_, ".log");
    log_fd = open(log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (log_fd < 0) {
      absl::Status s = Errno(absl::StrCat("open ", log_path_));
      close_all();
      return s;
    }
  }
  // Everything the child needs is built before fork: it only calls
  // async-signal-safe functions until exec.
  std::vector<char*> argv = Pointers(options.argv);
  std::vector<std::string> env_strings = Environment(options.env);
  std::vector<char*> envp = Pointers(env_strings);
  const pid_t pid = fork();
  if (pid < 0) {
    absl::Status s = Errno("fork");
    close_all();
    return s;
  }
  if (pid == 0) {
    prctl(PR_SET_PDEATHSIG, SIGKILL);  // die with the test
    if (in[0] >= 0) {
      dup2(in[0], 0);
    }
    dup2(out[1], 1);
    if (options.stderr_to_stdout) {
      dup2(out[1], 2);
    } else if (log_fd >= 0) {
      dup2(log_fd, 2);
    }
    execve(argv[0], argv.data(), envp.data());
    _exit(127);
  }
  pid_ = pid;
  stdout_fd_ = std::exchange(out[0], -1);
  stdin_fd_ = std::exchange(in[1], -1);
  close_all();
  return absl::OkStatus();
}

ChildProcess::~ChildProcess() {
  if (stdin_fd_ >= 0) {
    close(std::exchange(stdin_fd_, -1));  // end of input: a line-protocol child exits
    Wait(absl::Seconds(10)).IgnoreError();
  }
  Kill();
  CloseIfOpen(stdout_fd_);
}

absl::Status ChildProcess::Send(absl::string_view line) {
  if (stdin_fd_ < 0) {
    return absl::FailedPreconditionError(absl::StrCat(name_, " has no stdin pipe"));
  }
  const std::string data = absl::StrCat(line, "\n");
  if (write(stdin_fd_, data.data(), data.size()) != static_cast<ssize_t>(data.size())) {
    return absl::UnavailableError(absl::StrCat("write to ", name_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

absl::Status ChildProcess::Fill(absl::Time deadline) {
  while (true) {
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::DeadlineExceededError("");
    }
    pollfd pfd{stdout_fd_, POLLIN, 0};
    const int ms = static_cast<int>(std::min<int64_t>(absl::ToInt64Milliseconds(left) + 1, 1000));
    const int r = poll(&pfd, 1, ms);
    if (r < 0 && errno != EINTR) {
      return Errno("poll");
    }
    if (r <= 0) {
      continue;
    }
    char chunk[4096];
    const ssize_t n = read(stdout_fd_, chunk, sizeof(chunk));
    if (n < 0 && errno == EINTR) {
      continue;
    }
    if (n <= 0) {
      return absl::UnavailableError("");
    }
    buffer_.append(chunk, n);
    return absl::OkStatus();
  }
}

std::string ChildProcess::Describe() const {
  std::string out;
  if (!output_.empty() || !buffer_.empty()) {
    const std::string all = output_ + buffer_;
    absl::StrAppend(&out, "; stdout so far:\n", all.size() > 2000 ? all.substr(all.size() - 2000) : all);
  }
  if (!log_path_.empty()) {
    absl::StrAppend(&out, "; log tail:\n", Tail());
  }
  return out;
}

absl::StatusOr<std::string> ChildProcess::ReadLine(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    const size_t nl = buffer_.find('\n');
    if (nl != std::string::npos) {
      std::string line = buffer_.substr(0, nl);
      output_.append(buffer_, 0, nl + 1);
      buffer_.erase(0, nl + 1);
      return line;
    }
    const absl::Status s = Fill(deadline);
    if (absl::IsUnavailable(s)) {
      const absl::StatusOr<int> code = Wait(absl::Seconds(5));
      return absl::UnavailableError(
          absl::StrCat(name_, " closed its stdout (",
                       code.ok() ? absl::StrCat("exit code ", *code) : "still running", ")",
                       Describe()));
    }
    if (absl::IsDeadlineExceeded(s)) {
      return absl::DeadlineExceededError(absl::StrCat(
          "no line from ", name_, " within ",
          absl::FormatDuration(absl::Trunc(timeout, absl::Milliseconds(1))), Describe()));
    }
    RETURN_IF_ERROR(s);
  }
}

absl::StatusOr<std::string> ChildProcess::WaitForLine(absl::string_view prefix,
                                                      absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (true) {
    absl::StatusOr<std::string> line = ReadLine(deadline - absl::Now());
    if (!line.ok()) {
      return absl::Status(line.status().code(),
                          absl::StrCat("waiting for '", prefix, "': ", line.status().message()));
    }
    if (absl::StartsWith(*line, prefix)) {
      return line;
    }
  }
}

absl::StatusOr<std::string> ChildProcess::Ask(absl::string_view line, absl::Duration timeout) {
  RETURN_IF_ERROR(Send(line));
  return ReadLine(timeout);
}

absl::StatusOr<std::string> ChildProcess::ReadToEnd(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  absl::Status s;
  while ((s = Fill(deadline)).ok()) {
  }
  if (absl::IsDeadlineExceeded(s)) {
    return absl::DeadlineExceededError(absl::StrCat(
        name_, " did not finish within ",
        absl::FormatDuration(absl::Trunc(timeout, absl::Milliseconds(1))), Describe()));
  }
  if (!absl::IsUnavailable(s)) {
    return s;
  }
  std::string rest = std::exchange(buffer_, "");
  output_ += rest;
  return rest;
}

void ChildProcess::Signal(int sig) {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, sig);
  }
}

bool ChildProcess::running() {
  if (pid_ <= 0 || reaped_) {
    return false;
  }
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == 0) {
    return true;
  }
  reaped_ = true;  // r < 0: not our child any more; nothing left to wait for
  if (r == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  return false;
}

absl::StatusOr<int> ChildProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (running()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(
          absl::StrCat(name_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return exit_code_;
}

void ChildProcess::Kill() {
  if (pid_ <= 0 || reaped_) {
    return;
  }
  kill(pid_, SIGKILL);
  int status = 0;
  if (waitpid(pid_, &status, 0) == pid_) {
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  }
  reaped_ = true;
}

std::string ChildProcess::Tail(size_t bytes) const {
  if (log_path_.empty()) {
    return "";
  }
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  const std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

std::string ChildProcess::Field(absl::string_view line, absl::string_view key) {
  for (absl::string_view part : absl::StrSplit(line, ' ')) {
    if (absl::ConsumePrefix(&part, key) && absl::ConsumePrefix(&part, "=")) {
      return std::string(part);
    }
  }
  return "";
}

int ChildProcess::IntField(absl::string_view line, absl::string_view key) {
  int v = 0;
  return absl::SimpleAtoi(Field(line, key), &v) ? v : -1;
}

absl::StatusOr<RunResult> RunToCompletion(std::vector<std::string> argv, absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  ChildOptions options;
  options.argv = std::move(argv);
  options.stderr_to_stdout = true;
  ASSIGN_OR_RETURN(std::unique_ptr<ChildProcess> p, ChildProcess::Start(std::move(options)));
  RunResult r;
  ASSIGN_OR_RETURN(r.output, p->ReadToEnd(deadline - absl::Now()));
  ASSIGN_OR_RETURN(r.exit_code, p->Wait(deadline - absl::Now()));
  return r;
}

int64_t RssBytes(pid_t pid) {
  std::ifstream in(absl::StrCat("/proc/", pid, "/status"));
  std::string line;
  while (std::getline(in, line)) {
    absl::string_view v = line;
    if (absl::ConsumePrefix(&v, "VmRSS:")) {
      int64_t kb = 0;
      v = absl::StripAsciiWhitespace(v);
      if (absl::SimpleAtoi(v.substr(0, v.find(' ')), &kb)) {
        return kb * 1024;
      }
    }
  }
  return -1;
}

}  // namespace tandem::testing
