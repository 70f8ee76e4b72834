#pragma once
// WorkerConfig: the one configuration schema of tandem-prefill and
// tandem-decode, read from a flat YAML file whose keys are exactly the
// binaries' flag names (flags given on the command line override the file).
// `tandem up` and the Helm chart's ConfigMap write the same keys.
//
//   # every key, with its default
//   worker_id: ""                 # "" -> "<role>@<advertise address>"
//   role: decode                  # decode | colocated (tandem-decode); prefill (tandem-prefill)
//   model: ""                     # GGUF path or model name (docs/models.md), required
//   listen: "127.0.0.1:50051"     # gRPC listen address; port 0 picks a free port
//   advertise: ""                 # address peers dial (Decode.Commit); "" -> listen host
//                                 #   (hostname for 0.0.0.0) with the bound port
//   metrics_port: 9090            # Prometheus /metrics and health over plaintext HTTP
//                                 #   (kubelet probes); 0 picks a free port, -1 off
//   metrics_host: "127.0.0.1"
//   tls_ca: ""                    # internal mutual TLS (docs/security.md): the cluster CA,
//   tls_cert: ""                  #   this worker's certificate and key (PEM). Set all three
//   tls_key: ""                   #   or none; then the gRPC server requires a client cert
//                                 #   from the CA and the Commit channel presents this one
//   allow_insecure_internal: false  # without TLS a non-loopback `listen` is refused
//                                 #   unless this is true (then a WARNING is logged)
//   threads: 0                    # compute threads; 0 = all hardware threads
//   kv_cache_bytes: 268435456     # KV pool size (when kv_blocks is 0)
//   kv_blocks: 0                  # KV pool size in blocks; overrides kv_cache_bytes when > 0
//   block_size: 16                # tokens per KV block
//   kv_dtype: f32                 # f32 | f16
//   prefix_cache: true
//   chunk_size: 256               # max prefill tokens of one request in one step
//   token_budget: 512             # tokens per engine step (decode tokens + prefill chunks)
//   max_running: 64               # requests in the running batch (decode) / prefilling (prefill)
//   max_queued: 1024              # waiting requests before RESOURCE_EXHAUSTED
//   transport: ucx                # ucx | loopback (in-process tests only)
//   transport_mode: auto          # auto | put | am
//   ucx_tls: ""                   # UCX_TLS syntax ("sm", "tcp", "rc,sm"); "" = UCX default
//   ucx_net_devices: ""           # UCX_NET_DEVICES syntax ("lo", "mlx5_0:1"); "" = UCX default
//                                 #   = every interface; `tandem up` sets "lo" for tcp
//   reservation_deadline: 30s     # decode: a reservation whose KV is not committed by then is freed
//   drain_grace: 30s              # SIGTERM: time in-flight requests get to finish
//   heartbeat_interval: 1s        # Control.Watch heartbeats
//   liveness_timeout: 30s         # an engine loop iteration running longer is wedged: the worker
//                                 #   turns not live (/health/live 503, grpc.health.v1
//                                 #   NOT_SERVING, Control.Watch streams closed). Must exceed the
//                                 #   longest legitimate step: a full token_budget prefill step of
//                                 #   the largest model on the slowest CPU (seconds), plus the
//                                 #   stall of a loaded host
//
// Libraries take a validated WorkerConfig; only main.cc reads files and flags.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/engine/engine.h"
#include "proto/tls_credentials.h"

namespace tandem::serving {

enum class WorkerRole { kPrefill, kDecode, kColocated };
const char* WorkerRoleName(WorkerRole role);  // "prefill", "decode", "colocated"

struct WorkerConfig {
  std::string worker_id;
  WorkerRole role = WorkerRole::kDecode;
  std::string model;
  std::string listen = "127.0.0.1:50051";
  std::string advertise;
  int32_t metrics_port = 9090;
  std::string metrics_host = "127.0.0.1";
  std::string tls_ca;
  std::string tls_cert;
  std::string tls_key;
  bool allow_insecure_internal = false;
  int32_t threads = 0;
  int64_t kv_cache_bytes = 256ll << 20;
  int32_t kv_blocks = 0;
  int32_t block_size = 16;
  engine::GgmlType kv_dtype = engine::GgmlType::kF32;
  bool prefix_cache = true;
  int32_t chunk_size = 256;
  int32_t token_budget = 512;
  int32_t max_running = 64;
  int32_t max_queued = 1024;
  std::string transport = "ucx";
  std::string transport_mode = "auto";
  std::string ucx_tls;
  std::string ucx_net_devices;
  absl::Duration reservation_deadline = absl::Seconds(30);
  absl::Duration drain_grace = absl::Seconds(30);
  absl::Duration heartbeat_interval = absl::Seconds(1);
  absl::Duration liveness_timeout = absl::Seconds(30);

  // Every key Set() accepts, in schema order (the flag names).
  static const std::vector<std::string>& Keys();

  // Sets one field from its text form ("30s", "true", "f16", ...).
  // InvalidArgument naming the key for an unknown key or a bad value.
  absl::Status Set(absl::string_view key, absl::string_view value);

  // Applies a flat YAML mapping of key: scalar (comments allowed). Keys are
  // those of Keys(); InvalidArgument naming the key (unknown key, non-scalar,
  // bad value) or the YAML error with its line.
  absl::Status ApplyYaml(absl::string_view yaml_text);
  absl::Status ApplyYamlFile(const std::string& path);

  // InvalidArgument naming the field: empty model, bad sizes (block_size,
  // chunk_size, token_budget, max_running, max_queued, threads < 0,
  // kv_cache_bytes/kv_blocks), metrics_port outside [-1, 65535], unknown
  // transport or mode, non-positive durations, some but not all of tls_*.
  // FailedPrecondition for a non-loopback `listen` without TLS unless
  // allow_insecure_internal.
  absl::Status Validate() const;

  // The internal TLS files (not enabled() when the tls_* keys are empty).
  proto::TlsFiles tls() const { return {tls_ca, tls_cert, tls_key}; }

  engine::EngineConfig ToEngineConfig() const;

  // The address peers dial once the gRPC port is bound: `advertise` when set,
  // else the listen host (the hostname for 0.0.0.0 / [::]) with `bound_port`.
  std::string AdvertiseAddress(int bound_port) const;
  // worker_id, or "<role>@<advertise address>" when empty.
  std::string WorkerId(int bound_port) const;
};

}  // namespace tandem::serving
