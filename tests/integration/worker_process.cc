#include "tests/integration/worker_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cstring>
#include <fstream>
#include <sstream>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/strip.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "tests/testing/test_paths.h"

namespace tandem::testing {
namespace {

std::string Field(absl::string_view line, absl::string_view key) {
  for (absl::string_view part : absl::StrSplit(line, ' ')) {
    if (absl::ConsumePrefix(&part, key) && absl::ConsumePrefix(&part, "=")) {
      return std::string(part);
    }
  }
  return "";
}

}  // namespace

absl::StatusOr<std::unique_ptr<WorkerProcess>> WorkerProcess::Start(
    const std::string& binary, const std::vector<std::string>& args,
    absl::Duration ready_timeout) {
  static std::atomic<int> counter{0};
  std::unique_ptr<WorkerProcess> p(new WorkerProcess());
  p->name_ = absl::StrCat(binary.substr(binary.rfind('/') + 1), "#", counter++);
  p->log_path_ = absl::StrCat(TempDir(), "/", p->name_, ".log");
  int out[2];
  if (pipe2(out, O_CLOEXEC) != 0) {
    return absl::InternalError(absl::StrCat("pipe: ", std::strerror(errno)));
  }
  std::vector<std::string> argv_s = {binary};
  argv_s.insert(argv_s.end(), args.begin(), args.end());
  std::vector<char*> argv;
  for (std::string& a : argv_s) argv.push_back(a.data());
  argv.push_back(nullptr);
  const int log_fd = open(p->log_path_.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
  const pid_t pid = fork();
  if (pid < 0) {
    return absl::InternalError(absl::StrCat("fork: ", std::strerror(errno)));
  }
  if (pid == 0) {
    dup2(out[1], 1);
    if (log_fd >= 0) dup2(log_fd, 2);
    // Die with the test: no orphaned workers holding ports.
    prctl(PR_SET_PDEATHSIG, SIGKILL);
    execv(binary.c_str(), argv.data());
    _exit(127);
  }
  if (log_fd >= 0) close(log_fd);
  close(out[1]);
  p->pid_ = pid;
  p->stdout_fd_ = out[0];

  std::string buf;
  const absl::Time deadline = absl::Now() + ready_timeout;
  while (true) {
    const size_t nl = buf.find('\n');
    if (nl != std::string::npos) {
      const std::string line = buf.substr(0, nl);
      buf.erase(0, nl + 1);
      if (absl::StartsWith(line, "READY ")) {
        p->address_ = Field(line, "address");
        if (!absl::SimpleAtoi(Field(line, "metrics_port"), &p->metrics_port_)) {
          p->metrics_port_ = -1;
        }
        return p;
      }
      continue;
    }
    const absl::Duration left = deadline - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return absl::UnavailableError(absl::StrCat(p->name_, " not ready within ", absl::FormatDuration(ready_timeout),
                                                 "; log tail:\n", p->Tail()));
    }
    pollfd pfd{p->stdout_fd_, POLLIN, 0};
    const int r = poll(&pfd, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1);
    if (r <= 0) {
      continue;
    }
    char chunk[512];
    const ssize_t n = read(p->stdout_fd_, chunk, sizeof(chunk));
    if (n <= 0) {
      absl::StatusOr<int> code = p->Wait(absl::Seconds(5));
      return absl::UnavailableError(absl::StrCat(
          p->name_, " exited before READY (code ",
          code.ok() ? absl::StrCat(*code) : std::string("?"), "); log tail:\n", p->Tail()));
    }
    buf.append(chunk, n);
  }
}

WorkerProcess::~WorkerProcess() {
  if (pid_ > 0 && !reaped_) {
    kill(pid_, SIGKILL);
    Wait(absl::Seconds(10)).IgnoreError();
  }
  if (stdout_fd_ >= 0) close(stdout_fd_);
}

void WorkerProcess::Signal(int sig) {
  if (pid_ > 0 && !reaped_) kill(pid_, sig);
}

bool WorkerProcess::running() {
  if (reaped_) return false;
  int status = 0;
  const pid_t r = waitpid(pid_, &status, WNOHANG);
  if (r == pid_) {
    reaped_ = true;
    exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
    return false;
  }
  return true;
}

absl::StatusOr<int> WorkerProcess::Wait(absl::Duration timeout) {
  const absl::Time deadline = absl::Now() + timeout;
  while (running()) {
    if (absl::Now() >= deadline) {
      return absl::DeadlineExceededError(absl::StrCat(name_, " still running after ", absl::FormatDuration(timeout)));
    }
    absl::SleepFor(absl::Milliseconds(5));
  }
  return exit_code_;
}

std::string WorkerProcess::Tail(size_t bytes) const {
  std::ifstream in(log_path_);
  std::stringstream ss;
  ss << in.rdbuf();
  std::string s = ss.str();
  return s.size() > bytes ? s.substr(s.size() - bytes) : s;
}

}  // namespace tandem::testing
