#pragma once
// A bare HTTP/1.1 client on a socket, for the tests that must misbehave the
// way an HTTP library will not: slow headers, chunked uploads, hundreds of
// connections driven from one thread. 127.0.0.1 only; every wait bounded.

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <memory>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/string_view.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"

namespace tandem::router::testing {

// A response as far as it was read.
struct RawResponse {
  int status = 0;
  std::string head;      // status line and headers
  std::string body;      // de-chunked
  bool complete = false; // the whole body arrived
  size_t consumed = 0;    // bytes of the input it used, once complete
};

// Parses `raw` (what a connection received); complete once the body is in.
inline RawResponse ParseRawResponse(absl::string_view raw) {
  RawResponse r;
  const size_t end = raw.find("\r\n\r\n");
  if (end == absl::string_view::npos) {
    return r;
  }
  r.head = std::string(raw.substr(0, end));
  if (raw.size() > 12) {
    (void)absl::SimpleAtoi(raw.substr(9, 3), &r.status);
  }
  absl::string_view rest = raw.substr(end + 4);
  const std::string lower = absl::AsciiStrToLower(r.head);
  const size_t cl = lower.find("content-length:");
  if (cl != std::string::npos) {
    size_t len = 0;
    absl::string_view v = absl::string_view(lower).substr(cl + 15);
    v = v.substr(0, v.find("\r\n"));
    (void)absl::SimpleAtoi(absl::StripAsciiWhitespace(v), &len);
    r.body = std::string(rest.substr(0, len));
    r.complete = rest.size() >= len;
    r.consumed = r.complete ? end + 4 + len : 0;
    return r;
  }
  if (absl::StrContains(lower, "transfer-encoding: chunked")) {
    while (true) {
      const size_t line_end = rest.find("\r\n");
      if (line_end == absl::string_view::npos) {
        return r;
      }
      const size_t size = std::strtoul(std::string(rest.substr(0, line_end)).c_str(), nullptr, 16);
      if (rest.size() < line_end + 2 + size + 2) {
        return r;
      }
      if (size == 0) {
        r.complete = true;
        r.consumed = raw.size() - rest.size() + line_end + 4;
        return r;
      }
      const absl::string_view piece = rest.substr(line_end + 2, size);
      r.body.append(piece.data(), piece.size());
      rest.remove_prefix(line_end + 2 + size + 2);
    }
  }
  r.body = std::string(rest);  // until EOF; `complete` stays false
  return r;
}

// One connection. The destructor closes it.
class RawConn {
 public:
  // A non-blocking socket connecting to 127.0.0.1:`port` (the connect may
  // still be in progress); null when the socket cannot be made. A
  // `receive_buffer` > 0 sets SO_RCVBUF first (a small window: a slow reader).
  static std::unique_ptr<RawConn> Start(int port, int receive_buffer = 0) {
    const int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
      return nullptr;
    }
    if (receive_buffer > 0) {
      ::setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &receive_buffer, sizeof(receive_buffer));
    }
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_port = htons(static_cast<uint16_t>(port));
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 && errno != EINPROGRESS) {
      ::close(fd);
      return nullptr;
    }
    return std::unique_ptr<RawConn>(new RawConn(fd));
  }
  ~RawConn() { ::close(fd_); }
  RawConn(const RawConn&) = delete;
  RawConn& operator=(const RawConn&) = delete;

  int fd() const { return fd_; }
  int error() const { return error_; }  // errno of the first failed send / recv
  const std::string& received() const { return received_; }

  // Sends all of `data` within `timeout`; false on an error (see error()).
  bool Send(absl::string_view data, absl::Duration timeout = absl::Seconds(5)) {
    const absl::Time give_up = absl::Now() + timeout;
    while (!data.empty()) {
      const ssize_t n = ::send(fd_, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        continue;
      }
      if (n < 0 && errno != EAGAIN && errno != EINTR) {
        error_ = errno;
        return false;
      }
      if (!Wait(POLLOUT, give_up)) {
        error_ = ETIMEDOUT;
        return false;
      }
    }
    return true;
  }

  // Reads what is there without waiting; false once the peer closed or on
  // an error.
  bool ReadAvailable() {
    char buf[16384];
    while (true) {
      const ssize_t n = ::recv(fd_, buf, sizeof(buf), 0);
      if (n > 0) {
        received_.append(buf, static_cast<size_t>(n));
        continue;
      }
      if (n == 0) {
        return false;
      }
      if (errno == EAGAIN || errno == EINTR) {
        return true;
      }
      error_ = errno;
      return false;
    }
  }

  // Reads until a whole response is in, the peer closes or `timeout`. A
  // complete response is taken off received(): the next call reads the next
  // one (keep-alive, pipelining).
  RawResponse ReadResponse(absl::Duration timeout = absl::Seconds(10)) {
    const absl::Time give_up = absl::Now() + timeout;
    while (true) {
      const bool open = ReadAvailable();
      RawResponse r = ParseRawResponse(received_);
      if (r.complete) {
        received_.erase(0, r.consumed);
        return r;
      }
      if (!open || !Wait(POLLIN, give_up)) {
        return r;
      }
    }
  }

  // Whether the server closed its side (EOF or reset) within `timeout`.
  bool ClosedByPeer(absl::Duration timeout) {
    const absl::Time give_up = absl::Now() + timeout;
    while (ReadAvailable()) {
      if (!Wait(POLLIN, give_up)) {
        return false;
      }
    }
    return true;
  }

 private:
  explicit RawConn(int fd) : fd_(fd) {}

  bool Wait(short events, absl::Time give_up) {
    const absl::Duration left = give_up - absl::Now();
    if (left <= absl::ZeroDuration()) {
      return false;
    }
    pollfd p{fd_, events, 0};
    return ::poll(&p, 1, static_cast<int>(absl::ToInt64Milliseconds(left)) + 1) > 0;
  }

  const int fd_;
  int error_ = 0;
  std::string received_;
};

}  // namespace tandem::router::testing
