#pragma once
// The OpenAI-compatible HTTP front, asynchronous on Boost.Beast/Asio:
//   POST /v1/completions, /v1/chat/completions  (JSON, or SSE with "stream")
//   GET  /v1/models, /health, /health/ready, /health/live, /metrics
// /health/ready (and /health, kept for old clients, with the same meaning):
// 200 when every configured model can be served (see readiness.h), else 503;
// the JSON body names each model, whether it is ready and why not, plus the
// live worker counts. /health/live: 200 while `liveness` is OK (and an I/O
// thread answers at all), else 503 with the reason.
// With API keys configured (router/auth.h), every route (unknown ones too)
// but the public health / metrics paths answers 401 with an OpenAI error body
// (code "invalid_api_key") and `WWW-Authenticate: Bearer` unless the request
// carries "Authorization: Bearer <key>"; the key's tenant goes with the
// request.
// Errors are OpenAI error bodies {"error": {message, type, param, code}} with
// the matching HTTP status (400 bad input, 404 no route, 405 wrong method,
// 413 body over limits.max_body_bytes, 429 + Retry-After at capacity, 503
// no workers or too many connections, 504 deadline). A failure after the
// stream started is sent as an SSE event {"error": ...} and the stream ends.
// A client that disconnects cancels its request on the workers.
//
// Hostile clients: http_threads I/O threads run one io_context; a connection
// or a stream holds no thread. Bodies over limits.max_body_bytes are refused
// 413 before they are buffered, whatever the transfer encoding (a
// Content-Length over it right after the header; a chunked body as soon as
// its running total passes it). limits.header_timeout / body_timeout /
// idle_timeout close slow or idle connections; past limits.max_connections a
// new connection is answered 503 and closed; a stream whose reader lets more
// than limits.max_stream_buffer_bytes pile up is cancelled and closed; the
// listen backlog is http_backlog. Request routing: internal/http_handlers.h.
//
// Start/Stop from one thread. Stop after Router::Shutdown, which ends the
// requests whose events would otherwise still be posted to the I/O threads.

#include <functional>
#include <memory>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/base/metrics.h"
#include "router/auth.h"
#include "router/router.h"

namespace tandem::router {

class HttpServer {
 public:
  // `liveness` (any I/O thread, must not block; null = always live) backs
  // /health/live.
  // `api_keys` (router/auth.h) must outlive the server.
  HttpServer(Router& router, base::MetricsRegistry& metrics, const ApiKeys& api_keys,
             std::function<absl::Status()> liveness = nullptr);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds "host:port" (port 0 picks a free one) and serves on the I/O threads.
  absl::Status Start(absl::string_view address);
  int port() const { return port_; }
  // Stops accepting, closes every connection and joins. Idempotent.
  void Stop();

 private:
  struct Impl;
  Router& router_;
  std::unique_ptr<Impl> impl_;
  int port_ = 0;
};

}  // namespace tandem::router
