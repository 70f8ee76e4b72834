#pragma once
// One HTTP/1.1 connection of the OpenAI front, on Boost.Beast: reads a
// request with bounded header and body (beast's parser limits, so an
// oversized body of any transfer encoding is refused before it is buffered)
// under header / body / idle timeouts, hands it to Dispatch(), and writes
// the answer from one byte queue. Every handler runs on the connection's
// strand; nothing blocks an I/O thread.
//
// Lifetime: shared by its pending asynchronous operations and the events
// posted to it; it ends when the socket is closed and the last one returns.

#include <memory>
#include <optional>
#include <string>

#include <boost/asio/ip/tcp.hpp>
#include <boost/asio/steady_timer.hpp>
#include <boost/asio/strand.hpp>
#include <boost/beast/core/flat_buffer.hpp>
#include <boost/beast/core/tcp_stream.hpp>
#include <boost/beast/http/parser.hpp>
#include <boost/beast/http/string_body.hpp>

#include "router/internal/http_handlers.h"

namespace tandem::router::internal {

class HttpConnection : public std::enable_shared_from_this<HttpConnection>, public ResponseSink {
 public:
  // `socket`'s executor must be a strand.
  HttpConnection(boost::asio::ip::tcp::socket socket, HttpContext& ctx);
  ~HttpConnection() override;

  // Serves requests until the client leaves, a timeout or a limit.
  void Run();
  // Answers 503 (too many connections) and closes.
  void RejectBusy();

  // ResponseSink (strand).
  void Respond(HttpResponse response) override;
  void StartStream(HttpResponse head) override;
  void WriteChunk(std::string data) override;
  void EndStream() override;

 private:
  void ReadRequest();
  void ReadHeader();
  void OnHeader(boost::beast::error_code ec);
  void ReadBody();
  void OnBody(boost::beast::error_code ec);
  // While a generation runs: a read that notices the client leaving (EOF or
  // reset) and cancels the request; what it reads (a pipelined request) is
  // kept for the next ReadRequest.
  void WatchForHangUp();
  // Answers a request that could not be read (and closes after).
  void RefuseRequest(const absl::Status& s, int http_status);
  void Queue(std::string bytes);
  void Pump();
  void OnWritten(boost::beast::error_code ec);
  // The response went out: the next request, or a lingering close.
  void AfterResponse();
  void LingeringClose();
  void Drain(size_t left);
  void Close();
  void ArmTick();

  boost::beast::tcp_stream stream_;
  HttpContext& ctx_;
  const LimitsConfig& limits_;
  boost::beast::flat_buffer buffer_;
  std::optional<boost::beast::http::request_parser<boost::beast::http::string_body>> parser_;
  boost::asio::steady_timer tick_;
  std::shared_ptr<GenerationExchange> exchange_;
  std::string pending_;   // queued bytes, not yet handed to a write
  std::string writing_;   // the bytes of the write in flight
  bool write_in_flight_ = false;
  bool response_done_ = false;  // the whole response is queued
  bool keep_alive_ = false;     // of the current request
  bool closing_ = false;        // close once the queue is written
  bool closed_ = false;
  bool first_request_ = true;
  bool watching_ = false;  // the hang-up read is pending
  // The response is out while the hang-up read was pending: what to do once
  // it returns (cancelled). Null = nothing yet.
  void (HttpConnection::*after_watch_)() = nullptr;
};

}  // namespace tandem::router::internal
