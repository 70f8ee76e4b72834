#pragma once
// The router's typed configuration. main() builds it from a YAML file
// (ParseRouterConfigYaml) and flags, validates it once and hands it to the
// constructors; the library never reads flags, files or the environment.
//
// YAML schema (every key optional unless noted; durations as "3s", "250ms"):
//
//   grpc_address: 0.0.0.0:50051     # public Generation service; port 0 = pick
//   http_address: 0.0.0.0:8080      # OpenAI-compatible HTTP; "" = off
//   mode: auto                      # auto | disaggregated | colocated
//   max_route_attempts: 2           # tries of one choice before any token went out
//   http_threads: 0                 # 0 = limits.max_inflight + 8
//   models:                         # required, at least one
//     - name: stories260K           # id clients send; default: file name stem
//       path: /models/stories260K.gguf   # required: tokenizer + metadata
//       chat_template: ""           # "" = GGUF tokenizer.chat_template; or a
//                                   # family name (chatml, llama2, llama3, ...)
//                                   # or a template text to recognise
//       worker_model: ""            # the model id workers announce in their
//                                   # Watch snapshot; "" = as workers derive it
//                                   # (GGUF general.name, else the file name)
//   workers:
//     static: [10.0.0.5:7001]       # worker gRPC addresses
//     dns: [decode.svc:7001]        # names re-resolved every dns_refresh
//     dns_refresh: 10s
//     heartbeat_timeout: 3s
//     backoff_initial: 100ms
//     backoff_max: 5s
//   limits:
//     max_inflight: 256             # admitted requests at once; more -> 429
//     retry_after: 1s
//     max_prompt_tokens: 0          # 0 = the model's context length - 1
//     max_n: 8
//     max_logprobs: 20
//     max_stop_strings: 16
//     max_stop_string_bytes: 256
//     default_max_tokens: 256       # when a request gives none (capped by context)
//     default_timeout: 600s         # request deadline when the client sets none
//     max_body_bytes: 8388608
//     max_grpc_message_bytes: 4194304  # gRPC front, both ways; a Tokenize reply
//                                      # over it is RESOURCE_EXHAUSTED

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"

namespace tandem::router {

enum class RoutingMode {
  kAuto,            // disaggregated when a prefill + decode pair is live, else colocated
  kDisaggregated,   // prefill + decode pairs only
  kColocated,       // colocated workers only
};
absl::string_view RoutingModeName(RoutingMode mode);
absl::StatusOr<RoutingMode> ParseRoutingMode(absl::string_view name);

struct ServedModelConfig {
  std::string name;            // default: the model name, else the GGUF file's stem
  std::string path;            // required: a GGUF path or a model name (docs/models.md)
  std::string chat_template;   // default "": from the GGUF, chatml when it has none
  std::string worker_model;    // default "": general.name, else the file name
};

struct DiscoveryConfig {
  std::vector<std::string> static_workers;  // "host:port"
  std::vector<std::string> dns_workers;     // "name:port", resolved with getaddrinfo
  absl::Duration dns_refresh = absl::Seconds(10);
  // A worker whose Watch stream has been silent this long leaves rotation.
  absl::Duration heartbeat_timeout = absl::Seconds(3);
  absl::Duration backoff_initial = absl::Milliseconds(100);
  absl::Duration backoff_max = absl::Seconds(5);
};

struct LimitsConfig {
  int32_t max_inflight = 256;
  absl::Duration retry_after = absl::Seconds(1);
  int32_t max_prompt_tokens = 0;      // 0 = context length - 1
  int32_t max_n = 8;
  int32_t max_logprobs = 20;          // top logprobs per token (sampling allows 20)
  int32_t max_stop_strings = 16;
  int32_t max_stop_string_bytes = 256;
  int32_t default_max_tokens = 256;
  absl::Duration default_timeout = absl::Seconds(600);
  int64_t max_body_bytes = 8 << 20;
  // The gRPC front's largest message received and sent (gRPC's 4 MiB default,
  // set explicitly). Tokenize answers RESOURCE_EXHAUSTED naming this limit
  // rather than send a reply a default client cannot receive.
  int32_t max_grpc_message_bytes = 4 << 20;
};

struct RouterConfig {
  std::string grpc_address = "0.0.0.0:50051";
  std::string http_address = "0.0.0.0:8080";
  RoutingMode mode = RoutingMode::kAuto;
  int32_t max_route_attempts = 2;
  int32_t http_threads = 0;
  std::vector<ServedModelConfig> models;
  DiscoveryConfig discovery;
  LimitsConfig limits;

  // InvalidArgument naming the field.
  absl::Status Validate() const;
};

// Parses the YAML above. Unknown keys and wrongly typed values are
// InvalidArgument naming the key path ("limits.max_n: ..."). Relative model
// paths are resolved against `base_dir` when it is not empty. Does not
// Validate().
absl::StatusOr<RouterConfig> ParseRouterConfigYaml(absl::string_view yaml,
                                                   absl::string_view base_dir = "");

}  // namespace tandem::router
