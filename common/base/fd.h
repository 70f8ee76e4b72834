#pragma once
// UniqueFd: sole owner of a POSIX file descriptor, closed on destruction.
//
// Move-only. close() is called once and never retried: on Linux the
// descriptor is released even when close() fails with EINTR, and a retry
// could close a descriptor another thread has just been handed. errno is
// left as it was, so an error path may read it after a UniqueFd died.

#include <unistd.h>

#include <cerrno>
#include <utility>

namespace tandem::base {

class UniqueFd {
 public:
  UniqueFd() = default;
  explicit UniqueFd(int fd) : fd_(fd) {}
  UniqueFd(UniqueFd&& other) noexcept : fd_(other.release()) {}
  UniqueFd& operator=(UniqueFd&& other) noexcept {
    if (this != &other) {
      reset(other.release());
    }
    return *this;
  }
  UniqueFd(const UniqueFd&) = delete;
  UniqueFd& operator=(const UniqueFd&) = delete;
  ~UniqueFd() { reset(); }

  // The descriptor, or -1 when none is held.
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  explicit operator bool() const { return valid(); }

  // Closes the held descriptor (if any) and takes `fd`.
  void reset(int fd = -1) {
    const int old = std::exchange(fd_, fd);
    if (old >= 0 && old != fd) {
      const int saved_errno = errno;
      ::close(old);  // not retried on EINTR (see above)
      errno = saved_errno;
    }
  }

  // Gives up ownership without closing; returns the descriptor (or -1).
  [[nodiscard]] int release() { return std::exchange(fd_, -1); }

 private:
  int fd_ = -1;
};

}  // namespace tandem::base
