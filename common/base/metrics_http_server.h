#pragma once
// MetricsHttpServer: serves a MetricsRegistry's Prometheus text on
// GET /metrics, and the process's health probes, over plain HTTP
// (cpp-httplib) on its own small thread pool so scrapes never touch an
// engine thread. Probes (kubelet httpGet, which cannot speak the mTLS of the
// gRPC port):
//   GET /health/live   200 "ok", or 503 with the reason (HealthProbes::live)
//   GET /health/ready  200 "ok", or 503 with the reason (HealthProbes::ready)
//   GET /healthz       alias of /health/live
//
// Thread-safe; Stop() is idempotent and run by the destructor.

#include <functional>
#include <memory>
#include <string>
#include <thread>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "common/base/metrics.h"

namespace httplib {
class Server;
}  // namespace httplib

namespace tandem::base {

// What the health paths answer; each runs on a server thread per request
// and must be thread-safe and quick. An unset probe always answers OK.
struct HealthProbes {
  std::function<absl::Status()> live;
  std::function<absl::Status()> ready;
};

class MetricsHttpServer {
 public:
  // Binds host:port (port 0: any free port) and starts serving. `registry`
  // must outlive the server. Unavailable when the port cannot be bound.
  static absl::StatusOr<std::unique_ptr<MetricsHttpServer>> Start(const MetricsRegistry& registry,
                                                                   const std::string& host,
                                                                   int port,
                                                                   HealthProbes probes = {});
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
