#pragma once
// MetricsHttpServer: serves a MetricsRegistry's Prometheus text on
// GET /metrics (and 200 "ok" on GET /healthz) over HTTP (cpp-httplib), on
// its own small thread pool so scrapes never touch an engine thread.
//
// Thread-safe; Stop() is idempotent and run by the destructor.

#include <memory>
#include <string>
#include <thread>

#include "absl/status/statusor.h"
#include "common/base/metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace tandem::base {

class MetricsHttpServer {
 public:
  // Binds host:port (port 0: any free port) and starts serving. `registry`
  // must outlive the server. Unavailable when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const MetricsRegistry& registry,
                                                                   const std::string& host,
                                                                   int port);
  ~MetricsHttpServer();
  MetricsHttpServer(const MetricsHttpServer&) = delete;
  MetricsHttpServer& operator=(const MetricsHttpServer&) = delete;

  int port() const { return port_; }
  void Stop();

 private:
  MetricsHttpServer() = default;

  std::unique_ptr<httplib::Server> server_;
  std::thread thread_;
  int port_ = 0;
};

}  // namespace tandem::base
