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
//   http_threads: 2                 # HTTP I/O threads (one io_context); 0 = 2
//   http_backlog: 4096              # listen backlog of the HTTP socket (the
//                                   # kernel caps it at net.core.somaxconn)
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
//   internal_tls:                   # mutual TLS to the workers (docs/security.md):
//     ca: ""                        #   cluster CA (PEM), verifies each worker
//     cert: ""                      #   the router's certificate (PEM), shown to workers
//     key: ""                       #   its key; all three or none (none: plaintext)
//   allow_insecure_internal: false  # without internal_tls, a non-loopback worker
//                                   # address is refused unless this is true
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
//     max_body_bytes: 8388608       # HTTP request body, any transfer encoding:
//                                   # more -> 413 before it is read
//     max_prompt_bytes: 0           # prompt text / chat message bytes, checked
//                                   # before tokenizing (both fronts; more ->
//                                   # 400); 0 = 16 x the model's context length,
//                                   # at least 65536
//     header_timeout: 10s           # HTTP: the whole request header must arrive
//                                   # within this from its first byte
//     body_timeout: 30s             # HTTP: the body within this after the header;
//                                   # also bounds one write to a client
//     idle_timeout: 60s             # HTTP keep-alive: close after this long with
//                                   # no new request
//     max_connections: 2048         # HTTP connections at once; more are answered
//                                   # 503 and closed
//     max_stream_buffer_bytes: 1048576  # SSE bytes queued for a slow reader;
//                                       # more cancels the request and closes
//     max_grpc_message_bytes: 4194304  # gRPC front, both ways; a Tokenize reply
//                                      # over it is RESOURCE_EXHAUSTED
//     parse_special_in_content: false  # true: control-token text inside chat
//                                      # message content ("<|im_end|>") becomes
//                                      # the control token (llama.cpp's server,
//                                      # transformers); false: it stays text
//   auth:                           # API keys on both public fronts (router/auth.h);
//                                   # no key configured = no authentication
//     keys_file: ""                 # YAML {tenants: [{name, key | key_sha256}]};
//                                   # relative to this file; "" = none
//     keys_env: TANDEM_API_KEYS     # variable main() reads, "tenant=key,...";
//                                   # "" = read none
//     public_health: true           # /health, /health/ready, /health/live need no key
//     public_metrics: true          # /metrics needs no key
//   expose_route_workers: false     # GenerateResponse.route names the workers'
//                                   # ids (addresses by default); off: left empty
//   embedding:                      # sentence embeddings (router/embedder.h) for the
//                                   # semantic cache and complexity routing
//     model: ""                     # e.g. all-minilm-l6-v2 (docs/models.md); "" = off
//     threads: 1                    # encoder threads
//     max_seq_tokens: 256           # longer texts are cut (sentence-transformers' limit)
//     max_batch: 32                 # texts per encoder call (concurrent callers batch)
//     precision: bf16               # bf16 (AVX512-BF16 CPUs; F32 elsewhere) | f32
//   semantic_cache:                 # response cache (router/semantic_cache.h)
//     enabled: false
//     capacity: 10000               # entries over both tiers; LRU eviction
//     ttl: 1h                       # an entry answers for this long after it was stored
//     threshold: 0.9                # cosine a vector hit needs (tau), every model...
//     thresholds: {qwen: 0.93}      # ...unless listed here by served model name
//     exact_only: false             # true: no vector tier (no embedding model needed)
//   routing:                        # complexity routing over model pools (router/complexity.h);
//                                   # absent = off (requests name their model)
//     alias: auto                   # the routed model id clients send (also what a request
//                                   # naming no model gets); listed by /v1/models
//     embedding_weight: 0.6         # share of the exemplar-similarity term in the score when
//                                   # an embedding model runs (the rest: prompt features)
//     neighbors: 3                  # kNN: a pool's similarity is the mean of its k most
//                                   # similar exemplars
//     temperature: 0.05             # softmax temperature over the pools' similarities
//     pools:                        # at least two, cheapest first
//       - name: small               # the pool's label (metrics, x-tandem-route-pool)
//         model: qwen2.5-coder-0.5b-instruct   # required: a served model's name (models:)
//         min_score: 0              # takes scores in [min_score, the next pool's min_score);
//                                   # the first pool's is 0, then strictly ascending
//         exemplars: ["What is the capital of France?"]   # labelled prompts like this pool's
//         exemplars_file: ""        # more, one per line ('#' comments); relative to this file
//   placement: kv_aware             # kv_aware | least_load: which prefill (or
//                                   # colocated) worker a request goes to;
//                                   # kv_aware weighs the prompt prefix a
//                                   # worker's prefix cache holds against its
//                                   # queue (router/picker.h has the cost)
//   admission:                      # admission control (router/admission.h); every
//                                   # limit off by default. Decided before any
//                                   # worker is called; a refusal is 429 /
//                                   # RESOURCE_EXHAUSTED with Retry-After
//     defaults:                     # every tenant's buckets (the API key's tenant;
//                                   # "anonymous" when keys are off)
//       requests_per_second: 0      # request bucket refill; 0 = no limit
//       request_burst: 0            # its size; 0 = max(requests_per_second, 1)
//       tokens_per_second: 0        # token bucket: n x (prompt + max_tokens) per
//                                   # request; 0 = no limit
//       token_burst: 0              # its size; 0 = max(tokens_per_second, 1); a
//                                   # request costing more is refused 400
//     tenants:                      # per-tenant overrides; keys left out inherit
//       acme: {requests_per_second: 20, tokens_per_second: 50000}
//     max_ttft: 0s                  # the TTFT SLO: refuse a request whose estimated
//                                   # time to first token exceeds it; 0 = off
//     reject_past_deadline: true    # refuse a request whose estimate exceeds the
//                                   # time left to its deadline
//     max_queued_requests: 0        # waiting queue per model (admitted, no first
//                                   # token yet); 0 = no bound
//     max_queued_tokens: 0          # the same in prompt tokens; 0 = no bound
//     initial_prefill_rate: 500     # tokens/s assumed before measurements (with a
//                                   # margin, x2, until requests have finished)
//     rate_window: 10s              # the measured rate averages this much busy time

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/tls_credentials.h"

namespace tandem::router {

enum class RoutingMode {
  kAuto,            // disaggregated when a prefill + decode pair is live, else colocated
  kDisaggregated,   // prefill + decode pairs only
  kColocated,       // colocated workers only
};
absl::string_view RoutingModeName(RoutingMode mode);
absl::StatusOr<RoutingMode> ParseRoutingMode(absl::string_view name);

enum class Placement {
  kKvAware,    // cost over cached prefix, queued prefill and KV free space (router/picker.h)
  kLeastLoad,  // the least-loaded worker, ignoring prefix caches
};
absl::string_view PlacementName(Placement placement);
// InvalidArgument naming `placement` and the known values.
absl::StatusOr<Placement> ParsePlacement(absl::string_view name);

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
  // Threads that prepare gRPC Generate calls (tokenize, embed, start) off
  // gRPC's callback threads; most of their time they wait on the embedder.
  int32_t prepare_threads = 8;
  absl::Duration retry_after = absl::Seconds(1);
  int32_t max_prompt_tokens = 0;      // 0 = context length - 1
  int32_t max_n = 8;
  int32_t max_logprobs = 20;          // top logprobs per token (sampling allows 20)
  int32_t max_stop_strings = 16;
  int32_t max_stop_string_bytes = 256;
  int32_t default_max_tokens = 256;
  absl::Duration default_timeout = absl::Seconds(600);
  int64_t max_body_bytes = 8 << 20;
  int64_t max_prompt_bytes = 0;       // 0 = max(16 * context length, 64 KiB)
  absl::Duration header_timeout = absl::Seconds(10);
  absl::Duration body_timeout = absl::Seconds(30);
  absl::Duration idle_timeout = absl::Seconds(60);
  int32_t max_connections = 2048;
  int64_t max_stream_buffer_bytes = 1 << 20;
  // The gRPC front's largest message received and sent (gRPC's 4 MiB default,
  // set explicitly). Tokenize answers RESOURCE_EXHAUSTED naming this limit
  // rather than send a reply a default client cannot receive.
  int32_t max_grpc_message_bytes = 4 << 20;
  // Chat: the text of a control token inside a message's content is that
  // token (prompt injection: a user can close its turn and open a system
  // one). Off: only the template's own markers are control tokens.
  bool parse_special_in_content = false;
};

// Where API keys come from and which HTTP paths stay public (router/auth.h).
struct AuthConfig {
  std::string keys_file;                     // default "": no key file
  std::string keys_env = "TANDEM_API_KEYS";  // "" = no variable
  bool public_health = true;
  bool public_metrics = true;
};

// The router's sentence-embedding model (router/embedder.h), for the
// semantic cache and complexity routing.
struct EmbeddingConfig {
  std::string model;             // a GGUF path or model name; "" = no embedder
  int32_t threads = 1;           // encoder threads
  int32_t max_seq_tokens = 256;  // [CLS] ... [SEP] included; longer texts are cut
  int32_t max_batch = 32;        // texts per encoder call
  // "bf16" (default) or "f32": the encoder's matmuls in BF16 with FP32 sums
  // (engine::EncoderPrecision) on CPUs with AVX512-BF16, ~1.5-2x faster at
  // cosine 1 - 3e-5 to F32 (the labelled pairs' false-hit rate unchanged:
  // docs/benchmarks.md); F32 on every other CPU, or with "f32".
  std::string precision = "bf16";
};

// The response cache (router/semantic_cache.h). The vector tier needs
// embedding.model.
struct SemanticCacheConfig {
  bool enabled = false;
  int32_t capacity = 10000;
  absl::Duration ttl = absl::Hours(1);
  float threshold = 0.9f;
  std::map<std::string, float> thresholds;  // served model name -> threshold
  bool exact_only = false;
};

// One model pool of complexity routing (router/complexity.h).
struct RoutingPoolConfig {
  std::string name;                     // required
  std::string model;                    // required: a served model's name
  double min_score = 0;                 // lower end of the pool's score range
  std::vector<std::string> exemplars;   // default none
  std::string exemplars_file;           // default "": none
};

// Complexity routing; off when `pools` is empty.
struct RoutingConfig {
  std::string alias = "auto";
  double embedding_weight = 0.6;        // in [0, 1]
  int32_t neighbors = 3;                // >= 1
  double temperature = 0.05;            // > 0
  std::vector<RoutingPoolConfig> pools;

  bool enabled() const { return !pools.empty(); }
  // InvalidArgument naming the key ("routing.pools[1].min_score: ...").
  absl::Status Validate() const;
};

// One tenant's buckets (router/admission.h); 0 = no limit / the default.
struct TenantLimits {
  double requests_per_second = 0;
  double request_burst = 0;      // 0 = max(requests_per_second, 1)
  double tokens_per_second = 0;  // n x (prompt + max_tokens) of admitted requests
  double token_burst = 0;        // 0 = max(tokens_per_second, 1)
};

// Admission control (router/admission.h). Every limit is off by default.
struct AdmissionConfig {
  TenantLimits defaults;
  // By tenant name (the API key's; "anonymous" with keys off). An override
  // inherits each key it leaves out from `defaults`.
  std::map<std::string, TenantLimits> tenants;
  absl::Duration max_ttft = absl::ZeroDuration();  // 0 = no SLO check
  bool reject_past_deadline = true;
  int32_t max_queued_requests = 0;  // 0 = no bound
  int64_t max_queued_tokens = 0;    // 0 = no bound
  // Prompt tokens per second reaching their first token, per model, assumed
  // until measured; low on purpose (a CPU prefill of the 1.5B model). Until
  // requests have finished, estimates on it carry a margin (x2, shrinking as
  // they finish: router/admission.h, ColdMargin).
  double initial_prefill_rate = 500;
  absl::Duration rate_window = absl::Seconds(10);

  // The tenant's override, else the defaults.
  const TenantLimits& LimitsFor(const std::string& tenant) const;
  // InvalidArgument naming the admission.* key.
  absl::Status Validate() const;
};

struct RouterConfig {
  std::string grpc_address = "0.0.0.0:50051";
  std::string http_address = "0.0.0.0:8080";
  RoutingMode mode = RoutingMode::kAuto;
  int32_t max_route_attempts = 2;
  int32_t http_threads = 2;          // 0 = 2
  int32_t http_backlog = 4096;
  std::vector<ServedModelConfig> models;
  DiscoveryConfig discovery;
  // Internal mutual TLS for the channels to workers; off when no file is set.
  proto::TlsFiles internal_tls;
  bool allow_insecure_internal = false;
  LimitsConfig limits;
  AuthConfig auth;
  // Public clients see which workers served them (RouteInfo.prefill_worker /
  // decode_worker): worker ids default to role@address, an internal detail.
  bool expose_route_workers = false;
  EmbeddingConfig embedding;
  SemanticCacheConfig semantic_cache;
  RoutingConfig routing;
  Placement placement = Placement::kKvAware;
  AdmissionConfig admission;

  // InvalidArgument naming the field; FailedPrecondition for a non-loopback
  // worker address (static or dns) without internal_tls unless
  // allow_insecure_internal.
  absl::Status Validate() const;
};

// Parses the YAML above. Unknown keys and wrongly typed values are
// InvalidArgument naming the key path ("limits.max_n: ..."). Relative model
// and internal_tls paths are resolved against `base_dir` when it is not
// empty. Does not
// Validate().
absl::StatusOr<RouterConfig> ParseRouterConfigYaml(absl::string_view yaml,
                                                   absl::string_view base_dir = "");

}  // namespace tandem::router
