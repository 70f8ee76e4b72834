#pragma once
// ChildProcess: a binary a test (or a benchmark) runs as a child process.
// Started with argv and extra environment; its stdout is a pipe read line by
// line (a READY line, the replies of a line protocol); its stdin is ours or a
// pipe written with Send(); its stderr is ours or a log file under
// `log_dir` (Tail() quotes its end in failure messages). Signalled, awaited
// with a bounded wait; the destructor ends it: closing a stdin pipe asks it
// to exit (up to 10 s), then SIGKILL, then reap. The child also gets SIGKILL
// when the thread that started it exits, so no orphan keeps a port.
//
// RunToCompletion() runs a command to its end and returns its exit code and
// output (stdout and stderr together).
//
// No gtest in here: the transfer benchmark uses it too.

#include <sys/types.h>

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem::testing {

struct ChildOptions {
  std::vector<std::string> argv;  // argv[0]: the binary's path (no PATH search)
  std::vector<std::string> env;   // "NAME=value", over this process's environment
  std::string log_dir;            // stderr to <log_dir>/<name()>.log; empty: ours
  bool stdin_pipe = false;        // Send() writes its stdin; otherwise it reads ours
  bool stderr_to_stdout = false;  // stderr into the stdout pipe (overrides log_dir)
};

class ChildProcess {
 public:
  static absl::StatusOr<std::unique_ptr<ChildProcess>> Start(ChildOptions options);
  virtual ~ChildProcess();
  ChildProcess(const ChildProcess&) = delete;
  ChildProcess& operator=(const ChildProcess&) = delete;

  // "<basename of argv[0]>#<n>", unique in this process.
  const std::string& name() const { return name_; }
  pid_t pid() const { return pid_; }

  // A line (newline added) to its stdin; FailedPrecondition without
  // `stdin_pipe`, Unavailable when it is gone.
  absl::Status Send(absl::string_view line);
  // The next line it prints, without the newline. Unavailable when its stdout
  // closes first, DeadlineExceeded after `timeout`; both quote the log tail.
  absl::StatusOr<std::string> ReadLine(absl::Duration timeout = absl::Seconds(60));
  // Reads lines until one starts with `prefix`; returns that line.
  absl::StatusOr<std::string> WaitForLine(absl::string_view prefix,
                                          absl::Duration timeout = absl::Seconds(60));
  // Send(line), then ReadLine(timeout).
  absl::StatusOr<std::string> Ask(absl::string_view line,
                                  absl::Duration timeout = absl::Seconds(60));
  // Everything it prints from here until its stdout closes; DeadlineExceeded
  // after `timeout`.
  absl::StatusOr<std::string> ReadToEnd(absl::Duration timeout);
  // Every line read from its stdout so far, each with its newline.
  const std::string& output() const { return output_; }

  void Signal(int sig);  // no-op once reaped
  // Waits for it to exit: its exit code (128 + signal when killed), or
  // DeadlineExceeded after `timeout` (it keeps running).
  absl::StatusOr<int> Wait(absl::Duration timeout);
  bool running();
  // SIGKILL and reap.
  void Kill();

  // The last `bytes` of its log; empty when its stderr is not logged.
  std::string Tail(size_t bytes = 4000) const;

  // The value of "key=value" in a line of space-separated fields ("" when
  // absent), and the same as an int (-1 when absent or not a number).
  static std::string Field(absl::string_view line, absl::string_view key);
  static int IntField(absl::string_view line, absl::string_view key);

 protected:
  ChildProcess() = default;
  // Forks and execs; for Start() and the role wrappers built on this class.
  absl::Status Spawn(ChildOptions options);

 private:
  // Reads what is there into buffer_ (waiting up to `deadline`): Unavailable
  // at end of file, DeadlineExceeded when nothing came.
  absl::Status Fill(absl::Time deadline);
  std::string Describe() const;  // for error messages: the log tail, if any

  pid_t pid_ = -1;
  int stdin_fd_ = -1;
  int stdout_fd_ = -1;
  bool reaped_ = false;
  int exit_code_ = -1;
  std::string name_;
  std::string log_path_;
  std::string buffer_;  // read, not yet returned as a line
  std::string output_;
};

struct RunResult {
  int exit_code = -1;  // 128 + signal when killed
  std::string output;  // stdout and stderr
};

// Runs `argv` to its end. DeadlineExceeded (and killed) when it runs longer
// than `timeout`.
absl::StatusOr<RunResult> RunToCompletion(std::vector<std::string> argv,
                                          absl::Duration timeout = absl::Minutes(5));

// The resident memory (VmRSS) of process `pid` in bytes; -1 when unreadable.
int64_t RssBytes(pid_t pid);

}  // namespace tandem::testing
