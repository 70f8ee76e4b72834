#include "router/internal/http_connection.h"

#include <malloc.h>

#include <chrono>
#include <sstream>
#include <utility>

#include <boost/asio/post.hpp>
#include <boost/asio/write.hpp>
#include <boost/beast/http/empty_body.hpp>
#include <boost/beast/http/error.hpp>
#include <boost/beast/http/read.hpp>
#include <boost/beast/http/write.hpp>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "common/base/logging.h"
#include "router/api_error.h"

namespace tandem::router::internal {
namespace {

namespace net = boost::asio;
namespace beast = boost::beast;
namespace http = beast::http;
using tcp = net::ip::tcp;

constexpr size_t kHeaderLimitBytes = 64 << 10;
constexpr size_t kReadChunkBytes = 16 << 10;
// After an error answer: read (and drop) at most this much of what the
// client is still sending, for at most kLingerTime, so it sees the answer
// rather than a reset.
constexpr size_t kLingerBytes = 1 << 20;
constexpr std::chrono::seconds kLingerTime(2);
constexpr std::chrono::seconds kTickInterval(1);
constexpr size_t kTrimAfterBytes = 1 << 20;

std::chrono::nanoseconds Chrono(absl::Duration d) { return absl::ToChronoNanoseconds(d); }

bool IsParseError(const beast::error_code& ec) {
  return ec.category() == http::make_error_code(http::error::bad_target).category();
}

template <class Body>
void SetHeaders(http::response<Body>& res, const HttpResponse& r) {
  res.set(http::field::content_type, r.content_type);
  for (const auto& [name, value] : r.headers) {
    res.insert(name, value);
  }
}

template <class Message>
std::string Serialize(const Message& m) {
  std::ostringstream os;
  os << m;
  return std::move(os).str();
}

}  // namespace

HttpConnection::HttpConnection(tcp::socket socket, HttpContext& ctx)
    : stream_(std::move(socket)),
      ctx_(ctx),
      limits_(ctx.router.config().limits),
      tick_(stream_.get_executor()) {
  ctx_.connections.fetch_add(1, std::memory_order_relaxed);
}

HttpConnection::~HttpConnection() { ctx_.connections.fetch_sub(1, std::memory_order_relaxed); }

void HttpConnection::Run() { ReadRequest(); }

void HttpConnection::RejectBusy() {
  keep_alive_ = false;
  HttpResponse r = ErrorResponse(
      absl::UnavailableError(absl::StrCat("the router has ", limits_.max_connections,
                                          " HTTP connections open (limits.max_connections); "
                                          "retry later")),
      limits_.retry_after);
  r.close = true;
  Respond(std::move(r));
}

void HttpConnection::ReadRequest() {
  parser_.emplace();
  parser_->header_limit(kHeaderLimitBytes);
  parser_->body_limit(static_cast<uint64_t>(limits_.max_body_bytes));
  if (first_request_ || buffer_.size() > 0) {
    ReadHeader();
    return;
  }
  // Keep-alive: wait for the next request's first byte, then time its header.
  stream_.expires_after(Chrono(limits_.idle_timeout));
  stream_.async_read_some(buffer_.prepare(kReadChunkBytes),
                          [self = shared_from_this()](beast::error_code ec, size_t n) {
                            if (ec) {
                              self->Close();  // idle timeout, or the client left
                              return;
                            }
                            self->buffer_.commit(n);
                            self->ReadHeader();
                          });
}

void HttpConnection::ReadHeader() {
  stream_.expires_after(Chrono(limits_.header_timeout));
  http::async_read_header(stream_, buffer_, *parser_,
                          [self = shared_from_this()](beast::error_code ec, size_t) {
                            self->OnHeader(ec);
                          });
}

void HttpConnection::OnHeader(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    RefuseRequest(absl::InvalidArgumentError(absl::StrCat(
                      "the request body is larger than the router's limit of ",
                      limits_.max_body_bytes, " bytes (limits.max_body_bytes)")),
                  413);
    return;
  }
  if (ec == http::error::header_limit) {
    RefuseRequest(absl::InvalidArgumentError(absl::StrCat(
                      "the request header is larger than ", kHeaderLimitBytes, " bytes")),
                  431);
    return;
  }
  if (ec == http::error::end_of_stream || (ec && !IsParseError(ec))) {
    Close();  // the client left, or the header timed out (the stream is closed)
    return;
  }
  if (ec) {
    RefuseRequest(absl::InvalidArgumentError(
                      absl::StrCat("malformed HTTP request: ", ec.message())),
                  400);
    return;
  }
  const auto& req = parser_->get();
  if (beast::iequals(req[http::field::expect], "100-continue")) {
    Queue("HTTP/1.1 100 Continue\r\n\r\n");
  }
  ReadBody();
}

void HttpConnection::ReadBody() {
  stream_.expires_after(Chrono(limits_.body_timeout));
  http::async_read(stream_, buffer_, *parser_,
                   [self = shared_from_this()](beast::error_code ec, size_t) { self->OnBody(ec); });
}

void HttpConnection::OnBody(beast::error_code ec) {
  if (ec == http::error::body_limit) {
    // Also a chunked body: refused as soon as the running total passes.
    OnHeader(ec);
    return;
  }
  if (ec && (ec == http::error::end_of_stream || !IsParseError(ec))) {
    Close();
    return;
  }
  if (ec) {
    OnHeader(ec);
    return;
  }
  stream_.expires_never();
  http::request<http::string_body> msg = parser_->release();
  parser_.reset();
  keep_alive_ = msg.keep_alive();
  HttpRequest req;
  req.method = std::string(msg.method_string());
  const beast::string_view target = msg.target();
  req.path = std::string(target.substr(0, target.find('?')));
  for (const auto& field : msg) {
    req.headers.emplace_back(std::string(field.name_string()), std::string(field.value()));
  }
  req.body = std::move(msg.body());
  msg = {};
  PostFn post = [ex = stream_.get_executor()](std::function<void()> fn) {
    net::post(ex, std::move(fn));
  };
  exchange_ = Dispatch(ctx_, req, *this, post);
  if (exchange_ != nullptr && !exchange_->done() && !closed_) {
    ArmTick();
    WatchForHangUp();
  }
  if (req.body.size() >= kTrimAfterBytes) {
    std::string().swap(req.body);  // `= {}` would keep the capacity
    // Freed small blocks of a large request's JSON stay in glibc's bins;
    // hand them back (large blocks are mmapped: see HttpServer::Start).
    malloc_trim(0);
  }
}

void HttpConnection::WatchForHangUp() {
  if (buffer_.size() >= kHeaderLimitBytes) {
    return;  // enough pipelined bytes wait already; stop reading
  }
  watching_ = true;
  stream_.expires_never();  // the request's deadline bounds it, not a read timeout
  stream_.async_read_some(
      buffer_.prepare(kReadChunkBytes), [self = shared_from_this()](beast::error_code ec, size_t n) {
        self->watching_ = false;
        if (self->closed_) {
          return;
        }
        if (!ec) {
          self->buffer_.commit(n);
        }
        if (self->after_watch_ != nullptr && (!ec || ec == net::error::operation_aborted)) {
          auto next = std::exchange(self->after_watch_, nullptr);
          ((*self).*next)();
          return;
        }
        if (ec) {
          self->Close();  // the client left: cancels its request
          return;
        }
        if (self->exchange_ != nullptr && !self->exchange_->done()) {
          self->WatchForHangUp();
        }
        // Else the response is being written; AfterResponse reads on.
      });
}

void HttpConnection::RefuseRequest(const absl::Status& s, int http_status) {
  HttpResponse r = ErrorResponse(s, absl::ZeroDuration());
  r.status = http_status;
  r.close = true;
  Respond(std::move(r));
}

void HttpConnection::Respond(HttpResponse r) {
  if (closed_) {
    return;
  }
  closing_ = closing_ || r.close;
  http::response<http::string_body> res{static_cast<http::status>(r.status), 11};
  SetHeaders(res, r);
  res.keep_alive(keep_alive_ && !closing_);
  res.body() = std::move(r.body);
  res.prepare_payload();
  response_done_ = true;
  Queue(Serialize(res));
}

void HttpConnection::StartStream(HttpResponse head) {
  if (closed_) {
    return;
  }
  http::response<http::empty_body> res{static_cast<http::status>(head.status), 11};
  SetHeaders(res, head);
  res.keep_alive(keep_alive_);
  res.chunked(true);
  Queue(Serialize(res.base()));
}

void HttpConnection::WriteChunk(std::string data) {
  if (closed_ || data.empty()) {
    return;
  }
  std::string frame = absl::StrCat(absl::Hex(data.size()), "\r\n", data, "\r\n");
  if (static_cast<int64_t>(pending_.size() + writing_.size() + frame.size()) >
      limits_.max_stream_buffer_bytes) {
    LOG_EVERY_N(WARNING, 100) << "router HTTP: a client reads its stream too slowly (over "
                              << limits_.max_stream_buffer_bytes
                              << " bytes queued, limits.max_stream_buffer_bytes); cancelled";
    Close();
    return;
  }
  Queue(std::move(frame));
}

void HttpConnection::EndStream() {
  if (closed_) {
    return;
  }
  response_done_ = true;
  Queue("0\r\n\r\n");
}

void HttpConnection::Queue(std::string bytes) {
  pending_ += bytes;
  Pump();
}

void HttpConnection::Pump() {
  if (closed_ || write_in_flight_ || pending_.empty()) {
    return;
  }
  writing_.swap(pending_);
  pending_.clear();
  write_in_flight_ = true;
  // A client that stops reading cannot hold a write (and the connection)
  // forever.
  stream_.expires_after(Chrono(limits_.body_timeout));
  net::async_write(stream_, net::buffer(writing_),
                   [self = shared_from_this()](beast::error_code ec, size_t) {
                     self->OnWritten(ec);
                   });
}

void HttpConnection::OnWritten(beast::error_code ec) {
  write_in_flight_ = false;
  if (writing_.capacity() > (64 << 10)) {
    std::string().swap(writing_);  // give a large response's memory back
  } else {
    writing_.clear();
  }
  if (ec) {
    Close();  // the client left mid-response: cancels its request
    return;
  }
  if (!pending_.empty()) {
    Pump();
    return;
  }
  if (response_done_) {
    response_done_ = false;
    AfterResponse();
  }
}

void HttpConnection::AfterResponse() {
  if (closed_) {
    return;
  }
  exchange_.reset();
  tick_.cancel();
  first_request_ = false;
  const auto next = closing_ || !keep_alive_ ? &HttpConnection::LingeringClose
                                             : &HttpConnection::ReadRequest;
  if (watching_) {
    after_watch_ = next;  // one read at a time: after the hang-up read returns
    stream_.socket().cancel();
    return;
  }
  (this->*next)();
}

void HttpConnection::LingeringClose() {
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_send, ec);
  stream_.expires_after(kLingerTime);
  Drain(kLingerBytes);
}

void HttpConnection::Drain(size_t left) {
  buffer_.clear();
  stream_.async_read_some(buffer_.prepare(kReadChunkBytes),
                          [self = shared_from_this(), left](beast::error_code ec, size_t n) {
                            if (ec || n >= left) {
                              self->Close();
                              return;
                            }
                            self->Drain(left - n);
                          });
}

void HttpConnection::Close() {
  if (closed_) {
    return;
  }
  closed_ = true;
  if (exchange_ != nullptr) {
    exchange_->Abandon();  // the client left: cancel on the workers
    exchange_.reset();
  }
  tick_.cancel();
  beast::error_code ec;
  stream_.socket().shutdown(tcp::socket::shutdown_both, ec);
  stream_.close();
}

void HttpConnection::ArmTick() {
  tick_.expires_after(kTickInterval);
  tick_.async_wait([self = shared_from_this()](beast::error_code ec) {
    if (ec || self->closed_ || self->exchange_ == nullptr) {
      return;
    }
    self->exchange_->Tick(absl::Now());
    if (self->exchange_ != nullptr && !self->exchange_->done()) {
      self->ArmTick();
    }
  });
}

}  // namespace tandem::router::internal
