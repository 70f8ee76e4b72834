// tandem-router: the public gRPC Generation service and the OpenAI-compatible
// HTTP front in front of prefill / decode (or colocated) workers. Reads one
// YAML file (router/config.h documents every key); flags override it. Prints
// one line "READY grpc_port=... http_port=..." to stdout once serving;
// API keys (router/auth.h) come from auth.keys_file and the variable named by
// auth.keys_env (TANDEM_API_KEYS unless set); a bad key file or variable
// stops the start (exit 2) with an error naming the entry, never the key.
// SIGTERM / SIGINT drain (stop admitting, let in-flight requests finish within
// --drain-grace) and exit 0.

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/str_split.h"
#include "absl/time/time.h"
#include "common/base/flags.h"
#include "common/base/logging.h"
#include "common/base/termination_signal.h"
#include "router/auth.h"
#include "router/config.h"
#include "router/router_server.h"

ABSL_FLAG(std::string, config, "", "YAML config file (see router/config.h); flags override it");
ABSL_FLAG(std::string, grpc_address, "", "public gRPC address (default 0.0.0.0:50051; port 0: any)");
ABSL_FLAG(std::string, http_address, "", "OpenAI HTTP address (default 0.0.0.0:8080; port 0: any)");
ABSL_FLAG(std::vector<std::string>, model, {},
          "GGUF model path(s) or model names (docs/models.md) to serve, as name=path or path "
          "(adds to the config's models)");
ABSL_FLAG(std::vector<std::string>, workers, {}, "static worker addresses host:port (adds)");
ABSL_FLAG(std::vector<std::string>, worker_dns, {},
          "worker DNS names name:port, re-resolved periodically (adds)");
ABSL_FLAG(std::string, mode, "", "auto | disaggregated | colocated (default auto)");
ABSL_FLAG(std::string, placement, "", "kv_aware | least_load (default kv_aware; router/picker.h)");
ABSL_FLAG(int32_t, max_inflight, 0, "admitted requests at once (default 256)");
ABSL_FLAG(std::string, api_keys_file, "",
          "API key file (router/auth.h); overrides the config's auth.keys_file");
ABSL_FLAG(bool, expose_route_workers, false,
          "GenerateResponse.route names the workers (sets the config's expose_route_workers)");
ABSL_FLAG(absl::Duration, drain_grace, absl::Seconds(30),
          "SIGTERM: time in-flight requests get to finish");

namespace {

using tandem::router::RouterConfig;

absl::StatusOr<RouterConfig> BuildConfig() {
  RouterConfig config;
  if (const std::string path = absl::GetFlag(FLAGS_config); !path.empty()) {
    std::ifstream in(path);
    if (!in) {
      return absl::NotFoundError("cannot read config file " + path);
    }
    std::stringstream text;
    text << in.rdbuf();
    const size_t slash = path.find_last_of('/');
    absl::StatusOr<RouterConfig> parsed = tandem::router::ParseRouterConfigYaml(
        text.str(), slash == std::string::npos ? "." : path.substr(0, slash));
    if (!parsed.ok()) {
      return absl::Status(parsed.status().code(),
                          path + ": " + std::string(parsed.status().message()));
    }
    config = *std::move(parsed);
  }
  if (const std::string v = absl::GetFlag(FLAGS_grpc_address); !v.empty()) {
    config.grpc_address = v;
  }
  if (const std::string v = absl::GetFlag(FLAGS_http_address); !v.empty()) {
    config.http_address = v == "off" ? "" : v;
  }
  for (const std::string& m : absl::GetFlag(FLAGS_model)) {
    tandem::router::ServedModelConfig mc;
    std::vector<std::string> parts = absl::StrSplit(m, absl::MaxSplits('=', 1));
    if (parts.size() == 2) {
      mc.name = parts[0];
      mc.path = parts[1];
    } else {
      mc.path = m;
    }
    config.models.push_back(mc);
  }
  for (const std::string& w : absl::GetFlag(FLAGS_workers)) {
    config.discovery.static_workers.push_back(w);
  }
  for (const std::string& w : absl::GetFlag(FLAGS_worker_dns)) {
    config.discovery.dns_workers.push_back(w);
  }
  if (const std::string v = absl::GetFlag(FLAGS_mode); !v.empty()) {
    absl::StatusOr<tandem::router::RoutingMode> mode = tandem::router::ParseRoutingMode(v);
    if (!mode.ok()) {
      return mode.status();
    }
    config.mode = *mode;
  }
  if (const std::string v = absl::GetFlag(FLAGS_placement); !v.empty()) {
    absl::StatusOr<tandem::router::Placement> placement = tandem::router::ParsePlacement(v);
    if (!placement.ok()) {
      return placement.status();
    }
    config.placement = *placement;
  }
  if (const std::string v = absl::GetFlag(FLAGS_api_keys_file); !v.empty()) {
    config.auth.keys_file = v;
  }
  if (absl::GetFlag(FLAGS_expose_route_workers)) {
    config.expose_route_workers = true;
  }
  if (const int32_t v = absl::GetFlag(FLAGS_max_inflight); v > 0) {
    config.limits.max_inflight = v;
  }
  if (absl::Status s = config.Validate(); !s.ok()) {
    return s;
  }
  return config;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::base::BlockTerminationSignals();
  tandem::base::ParseFlags(
      argc, argv, "tandem-router --config=router.yaml | --model=M.gguf --workers=host:port,...");
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;

  absl::StatusOr<RouterConfig> config = BuildConfig();
  if (!config.ok()) {
    LOG(ERROR) << "tandem-router: " << config.status();
    return 2;
  }
  const char* keys_env =
      config->auth.keys_env.empty() ? nullptr : std::getenv(config->auth.keys_env.c_str());
  absl::StatusOr<tandem::router::ApiKeys> keys =
      tandem::router::ApiKeys::Load(config->auth, keys_env == nullptr ? "" : keys_env);
  if (!keys.ok()) {
    LOG(ERROR) << "tandem-router: " << keys.status();
    return 2;
  }
  absl::StatusOr<std::unique_ptr<tandem::router::RouterServer>> server =
      tandem::router::RouterServer::Create(*std::move(config), *std::move(keys));
  if (!server.ok()) {
    LOG(ERROR) << "tandem-router: " << server.status();
    return 2;
  }
  if (absl::Status s = (*server)->Start(); !s.ok()) {
    LOG(ERROR) << "tandem-router: " << s;
    return 1;
  }
  std::printf("READY grpc_port=%d http_port=%d\n", (*server)->grpc_port(), (*server)->http_port());
  std::fflush(stdout);

  const int sig = tandem::base::WaitForTerminationSignal();
  LOG(INFO) << "signal " << sig << ": draining (grace "
            << absl::FormatDuration(absl::GetFlag(FLAGS_drain_grace)) << ")";
  (*server)->Shutdown(absl::GetFlag(FLAGS_drain_grace));
  LOG(INFO) << "tandem-router exiting";
  return 0;
}
