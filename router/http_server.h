#pragma once
// The OpenAI-compatible HTTP front on cpp-httplib:
//   POST /v1/completions, /v1/chat/completions  (JSON, or SSE with "stream")
//   GET  /v1/models, /health, /health/ready, /health/live, /metrics
// /health/ready (and /health, kept for old clients, with the same meaning):
// 200 when every configured model can be served (see readiness.h), else 503;
// the JSON body names each model, whether it is ready and why not, plus the
// live worker counts. /health/live: 200 while `liveness` is OK (and an HTTP
// thread answers at all), else 503 with the reason.
// With API keys configured (router/auth.h), every route (unknown ones too)
// but the public health / metrics paths answers 401 with an OpenAI error body
// (code "invalid_api_key") and `WWW-Authenticate: Bearer` unless the request
// carries "Authorization: Bearer <key>"; the key's tenant goes with the
// request.
// Errors are OpenAI error bodies {"error": {message, type, param, code}} with
// the matching HTTP status (400 bad input, 429 + Retry-After at capacity, 503
// no workers, 504 deadline). A failure after the stream started is sent as an
// SSE event {"error": ...} and the stream ends. A client that disconnects
// cancels its request on the workers.
//
// httplib serves each connection on a pool thread that may block (unlike a
// gRPC callback); the pool holds limits.max_inflight + 8 threads (or
// http_threads) so admission control, not the pool, decides who waits.
// Start/Stop from one thread; handlers on pool threads.

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "common/base/metrics.h"
#include "router/auth.h"
#include "router/router.h"

namespace httplib {
class Server;
}

namespace tandem::router {

class HttpServer {
 public:
  // `liveness` (any pool thread, must not block; null = always live) backs
  // /health/live.
  // `api_keys` must outlive the server.
  HttpServer(Router& router, base::MetricsRegistry& metrics, const ApiKeys& api_keys,
             std::function<absl::Status()> liveness = nullptr);
  ~HttpServer();  // Stop()s
  HttpServer(const HttpServer&) = delete;
  HttpServer& operator=(const HttpServer&) = delete;

  // Binds "host:port" (port 0 picks a free one) and serves on a thread.
  absl::Status Start(absl::string_view address);
  int port() const { return port_; }
  // Stops accepting and joins. Idempotent. In-flight streams end when their
  // requests do (Router::Shutdown first for a drain).
  void Stop();

 private:
  Router& router_;
  base::MetricsRegistry& metrics_;
  const ApiKeys& api_keys_;
  const std::function<absl::Status()> liveness_;
  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace tandem::router
