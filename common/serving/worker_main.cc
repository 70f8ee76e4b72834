#include "common/serving/worker_main.h"

#include <cstdio>
#include <string>

#include "absl/flags/flag.h"
#include "absl/flags/reflection.h"
#include "common/base/flags.h"
#include "common/engine/model_store.h"

ABSL_FLAG(std::string, config, "", "YAML config file; flags given on the command line override it");
// One flag per WorkerConfig key; "" (unset) keeps the file's or the default value.
// role and max_running: in each binary's main.cc; reservation_deadline: only in
// tandem-decode's (the prefill worker has no use for it).
ABSL_FLAG(std::string, worker_id, "", "worker id (default <role>@<address>)");
ABSL_FLAG(std::string, model, "",
          "GGUF model path or model name, e.g. smollm2-135m-instruct (required)");
ABSL_FLAG(std::string, listen, "", "gRPC listen address (default 127.0.0.1:50051; port 0: any)");
ABSL_FLAG(std::string, advertise, "", "address peers dial (default: listen host, bound port)");
ABSL_FLAG(std::string, metrics_port, "", "Prometheus /metrics port (default 9090; 0 any, -1 off)");
ABSL_FLAG(std::string, metrics_host, "", "metrics bind host (default 127.0.0.1)");
ABSL_FLAG(std::string, tls_ca, "", "internal mTLS: cluster CA PEM (with --tls_cert, --tls_key)");
ABSL_FLAG(std::string, tls_cert, "", "internal mTLS: this worker's certificate PEM");
ABSL_FLAG(std::string, tls_key, "", "internal mTLS: this worker's private key PEM");
ABSL_FLAG(std::string, allow_insecure_internal, "",
          "true: serve a non-loopback listen address without TLS (default false)");
ABSL_FLAG(std::string, threads, "", "compute threads (default 0: all)");
ABSL_FLAG(std::string, kv_cache_bytes, "", "KV pool bytes (default 268435456)");
ABSL_FLAG(std::string, kv_blocks, "", "KV pool blocks, overrides kv_cache_bytes (default 0)");
ABSL_FLAG(std::string, block_size, "", "tokens per KV block (default 16)");
ABSL_FLAG(std::string, kv_dtype, "", "f32 | f16 (default f32)");
ABSL_FLAG(std::string, prefix_cache, "", "true | false (default true)");
ABSL_FLAG(std::string, chunk_size, "", "max prefill tokens per request per step (default 256)");
ABSL_FLAG(std::string, token_budget, "", "tokens per engine step (default 512)");
ABSL_FLAG(std::string, max_queued, "", "waiting requests before RESOURCE_EXHAUSTED (default 1024)");
ABSL_FLAG(std::string, transport, "", "ucx | loopback (default ucx)");
ABSL_FLAG(std::string, transport_mode, "", "auto | put | am (default auto)");
ABSL_FLAG(std::string, ucx_tls, "", "UCX transports, UCX_TLS syntax (default: UCX's)");
ABSL_FLAG(std::string, ucx_net_devices, "", "UCX devices, UCX_NET_DEVICES syntax (default: UCX's)");
ABSL_FLAG(std::string, drain_grace, "", "SIGTERM grace for in-flight requests (default 30s)");
ABSL_FLAG(std::string, heartbeat_interval, "", "Control.Watch heartbeat period (default 1s)");
ABSL_FLAG(std::string, liveness_timeout, "",
          "an engine loop iteration running longer is wedged: not live (default 30s)");

namespace tandem::serving {

std::optional<WorkerConfig> WorkerConfigFromFlags(WorkerRole default_role) {
  WorkerConfig config;
  config.role = default_role;
  if (const std::string path = absl::GetFlag(FLAGS_config); !path.empty()) {
    if (absl::Status s = config.ApplyYamlFile(path); !s.ok()) {
      LOG(ERROR) << s;
      return std::nullopt;
    }
  }
  for (const std::string& key : WorkerConfig::Keys()) {
    const absl::CommandLineFlag* flag = absl::FindCommandLineFlag(key);
    // Every key flag defaults to "" (unset): a non-empty value was given.
    if (flag != nullptr && !flag->CurrentValue().empty()) {
      if (absl::Status s = config.Set(key, flag->CurrentValue()); !s.ok()) {
        LOG(ERROR) << "--" << base::DashedFlagName(key) << ": " << s;
        return std::nullopt;
      }
    }
  }
  if (absl::Status s = config.Validate(); !s.ok()) {
    LOG(ERROR) << s;
    return std::nullopt;
  }
  absl::StatusOr<std::string> model = engine::ResolveModelPath(config.model);
  if (!model.ok()) {
    LOG(ERROR) << model.status();
    return std::nullopt;
  }
  config.model = *std::move(model);
  return config;
}

std::optional<WorkerConfig> InitWorkerProcess(int argc, char** argv,
                                              const WorkerMainOptions& options) {
  base::BlockTerminationSignals();
  base::ParseFlags(argc, argv, options.usage);
  google::InitGoogleLogging(argv[0]);
  FLAGS_logtostderr = true;
  return WorkerConfigFromFlags(options.default_role);
}

void PrintReadyLine(const WorkerServer& server) {
  std::printf("READY address=%s grpc_port=%d metrics_port=%d worker_id=%s\n",
              server.address().c_str(), server.grpc_port(), server.metrics_port(),
              server.worker_id().c_str());
  std::fflush(stdout);
}

}  // namespace tandem::serving
