#include "common/base/metrics_http_server.h"

#include <httplib.h>

#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/logging.h"

namespace tandem::base {
namespace {

// 200 "ok", or 503 with the probe's reason.
httplib::Server::Handler ProbeHandler(std::function<absl::Status()> probe) {
  return [probe = std::move(probe)](const httplib::Request&, httplib::Response& res) {
    const absl::Status s = probe ? probe() : absl::OkStatus();
    if (s.ok()) {
      res.set_content("ok\n", "text/plain");
      return;
    }
    res.status = 503;
    res.set_content(absl::StrCat(s.message(), "\n"), "text/plain");
  };
}

}  // namespace

absl::StatusOr<std::unique_ptr<MetricsHttpServer>> MetricsHttpServer::Start(
    const MetricsRegistry& registry, const std::string& host, int port, HealthProbes probes) {
  std::unique_ptr<MetricsHttpServer> s(new MetricsHttpServer());
  s->server_ = std::make_unique<httplib::Server>();
  // Scrapes are rare and cheap: two threads, not httplib's default of one per core.
  s->server_->new_task_queue = [] { return new httplib::ThreadPool(2); };
  s->server_->Get("/metrics", [&registry](const httplib::Request&, httplib::Response& res) {
    res.set_content(registry.RenderText(), "text/plain; version=0.0.4; charset=utf-8");
  });
  s->server_->Get("/health/live", ProbeHandler(probes.live));
  s->server_->Get("/healthz", ProbeHandler(probes.live));
  s->server_->Get("/health/ready", ProbeHandler(std::move(probes.ready)));
  int bound = -1;
  if (port == 0) {
    bound = s->server_->bind_to_any_port(host);
  } else if (s->server_->bind_to_port(host, port)) {
    bound = port;
  }
  if (bound <= 0) {
    return absl::UnavailableError(
        absl::StrCat("metrics server: cannot bind ", host, ":", port));
  }
  s->port_ = bound;
  httplib::Server* server = s->server_.get();
  s->thread_ = std::thread([server] { server->listen_after_bind(); });
  // httplib's stop() does nothing until the listen thread has marked the
  // server running: a Stop() right after Start() would otherwise leave that
  // thread in accept() and the join below hanging forever.
  while (!server->is_running()) {
    absl::SleepFor(absl::Milliseconds(1));
  }
  return s;
}

MetricsHttpServer::~MetricsHttpServer() { Stop(); }

void MetricsHttpServer::Stop() {
  if (server_ != nullptr) {
    server_->stop();
  }
  if (thread_.joinable()) {
    thread_.join();
  }
}

}  // namespace tandem::base
