#include "router/config.h"

#include <cmath>
#include <filesystem>
#include <utility>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/engine/model_store.h"
#include "router/internal/yaml_util.h"

namespace tandem::router {

using internal::CheckKeys;
using internal::ReadBool;
using internal::ReadDuration;
using internal::ReadInt;
using internal::ReadInt32;
using internal::ReadString;
using internal::ReadStringList;

namespace {

// `path` relative to `base_dir` (unchanged when absolute or either is empty).
std::string ResolvePath(const std::string& path, absl::string_view base_dir) {
  if (path.empty() || base_dir.empty() || std::filesystem::path(path).is_absolute()) {
    return path;
  }
  return (std::filesystem::path(std::string(base_dir)) / path).lexically_normal().string();
}

// A number (integer or decimal) at map[key]; untouched when absent.
absl::Status ReadRate(const YAML::Node& map, const std::string& key, const std::string& path,
                      double* out) {
  std::string text;
  RETURN_IF_ERROR(ReadString(map, key, path, &text));
  if (!text.empty() && !absl::SimpleAtod(text, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(internal::JoinPath(path, key), ": want a number, got '", text, "'"));
  }
  return absl::OkStatus();
}

// `node` (a map of TenantLimits keys) over *out: keys left out keep *out's.
absl::Status ParseTenantLimits(const YAML::Node& node, const std::string& path, TenantLimits* out) {
  RETURN_IF_ERROR(CheckKeys(
      node, path, {"requests_per_second", "request_burst", "tokens_per_second", "token_burst"}));
  RETURN_IF_ERROR(ReadRate(node, "requests_per_second", path, &out->requests_per_second));
  RETURN_IF_ERROR(ReadRate(node, "request_burst", path, &out->request_burst));
  RETURN_IF_ERROR(ReadRate(node, "tokens_per_second", path, &out->tokens_per_second));
  RETURN_IF_ERROR(ReadRate(node, "token_burst", path, &out->token_burst));
  return absl::OkStatus();
}

absl::Status ParseAdmission(const YAML::Node& a, AdmissionConfig* x) {
  RETURN_IF_ERROR(
      CheckKeys(a, "admission",
                {"defaults", "tenants", "max_ttft", "reject_past_deadline", "max_queued_requests",
                 "max_queued_tokens", "initial_prefill_rate", "rate_window"}));
  if (a.IsMap() && a["defaults"]) {
    RETURN_IF_ERROR(ParseTenantLimits(a["defaults"], "admission.defaults", &x->defaults));
  }
  if (a.IsMap() && a["tenants"] && !a["tenants"].IsNull()) {
    const YAML::Node tenants = a["tenants"];
    if (!tenants.IsMap()) {
      return absl::InvalidArgumentError(
          "admission.tenants: want a map of tenant name -> {requests_per_second, ...}");
    }
    for (const auto& kv : tenants) {
      const std::string name = kv.first.IsScalar() ? kv.first.Scalar() : "";
      if (name.empty()) {
        return absl::InvalidArgumentError("admission.tenants: a tenant name is empty");
      }
      TenantLimits limits = x->defaults;
      RETURN_IF_ERROR(ParseTenantLimits(kv.second, "admission.tenants." + name, &limits));
      x->tenants[name] = limits;
    }
  }
  RETURN_IF_ERROR(ReadDuration(a, "max_ttft", "admission", &x->max_ttft));
  RETURN_IF_ERROR(ReadBool(a, "reject_past_deadline", "admission", &x->reject_past_deadline));
  RETURN_IF_ERROR(ReadInt32(a, "max_queued_requests", "admission", &x->max_queued_requests));
  RETURN_IF_ERROR(ReadInt(a, "max_queued_tokens", "admission", &x->max_queued_tokens));
  RETURN_IF_ERROR(ReadRate(a, "initial_prefill_rate", "admission", &x->initial_prefill_rate));
  RETURN_IF_ERROR(ReadDuration(a, "rate_window", "admission", &x->rate_window));
  return absl::OkStatus();
}

}  // namespace

const TenantLimits& AdmissionConfig::LimitsFor(const std::string& tenant) const {
  auto it = tenants.find(tenant);
  return it == tenants.end() ? defaults : it->second;
}

absl::Status AdmissionConfig::Validate() const {
  std::vector<std::pair<std::string, const TenantLimits*>> all = {
      {"admission.defaults", &defaults}};
  for (const auto& [name, limits] : tenants) {
    all.emplace_back("admission.tenants." + name, &limits);
  }
  for (const auto& [path, l] : all) {
    for (const auto& [key, value] :
         {std::pair<const char*, double>{"requests_per_second", l->requests_per_second},
          {"request_burst", l->request_burst},
          {"tokens_per_second", l->tokens_per_second},
          {"token_burst", l->token_burst}}) {
      if (!(value >= 0) || std::isinf(value)) {
        return absl::InvalidArgumentError(
            absl::StrCat(path, ".", key, " must be a finite number >= 0, got ", value));
      }
    }
  }
  if (max_ttft < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("admission.max_ttft must be >= 0 (0 = off)");
  }
  if (max_queued_requests < 0 || max_queued_tokens < 0) {
    return absl::InvalidArgumentError(
        "admission.max_queued_requests and admission.max_queued_tokens must be >= 0 (0 = no "
        "bound)");
  }
  if (!(initial_prefill_rate > 0) || std::isinf(initial_prefill_rate)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "admission.initial_prefill_rate must be a positive number of tokens per second, got ",
        initial_prefill_rate));
  }
  if (rate_window <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("admission.rate_window must be positive");
  }
  return absl::OkStatus();
}

absl::string_view RoutingModeName(RoutingMode mode) {
  switch (mode) {
    case RoutingMode::kAuto:
      return "auto";
    case RoutingMode::kDisaggregated:
      return "disaggregated";
    case RoutingMode::kColocated:
      return "colocated";
  }
  return "auto";
}

absl::StatusOr<RoutingMode> ParseRoutingMode(absl::string_view name) {
  for (RoutingMode m : {RoutingMode::kAuto, RoutingMode::kDisaggregated, RoutingMode::kColocated}) {
    if (name == RoutingModeName(m)) {
      return m;
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "mode: unknown routing mode '", name, "' (known: auto, disaggregated, colocated)"));
}

absl::Status ValidateSemanticCache(const RouterConfig& c);  // below, with its parser

absl::string_view PlacementName(Placement placement) {
  switch (placement) {
    case Placement::kKvAware:
      return "kv_aware";
    case Placement::kLeastLoad:
      return "least_load";
  }
  return "kv_aware";
}

absl::StatusOr<Placement> ParsePlacement(absl::string_view name) {
  for (Placement p : {Placement::kKvAware, Placement::kLeastLoad}) {
    if (name == PlacementName(p)) {
      return p;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("placement: unknown placement '", name, "' (known: kv_aware, least_load)"));
}

namespace {

// The `placement` key (kv_aware when absent).
absl::Status ReadPlacement(const YAML::Node& root, RouterConfig& c) {
  std::string placement(PlacementName(c.placement));
  RETURN_IF_ERROR(ReadString(root, "placement", "", &placement));
  ASSIGN_OR_RETURN(c.placement, ParsePlacement(placement));
  return absl::OkStatus();
}

}  // namespace

absl::Status RouterConfig::Validate() const {
  if (grpc_address.empty() && http_address.empty()) {
    return absl::InvalidArgumentError("grpc_address and http_address are both empty");
  }
  if (models.empty()) {
    return absl::InvalidArgumentError("models: at least one model is required");
  }
  for (size_t i = 0; i < models.size(); ++i) {
    if (models[i].path.empty()) {
      return absl::InvalidArgumentError(absl::StrCat("models[", i, "].path is empty"));
    }
    for (size_t j = 0; j < i; ++j) {
      if (!models[i].name.empty() && models[i].name == models[j].name) {
        return absl::InvalidArgumentError(
            absl::StrCat("models[", i, "].name '", models[i].name, "' is used twice"));
      }
    }
  }
  if (max_route_attempts < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("max_route_attempts must be >= 1, got ", max_route_attempts));
  }
  if (http_threads < 0) {
    return absl::InvalidArgumentError(absl::StrCat("http_threads must be >= 0, got ", http_threads));
  }
  if (http_backlog < 1) {
    return absl::InvalidArgumentError(absl::StrCat("http_backlog must be >= 1, got ", http_backlog));
  }
  const DiscoveryConfig& d = discovery;
  if (d.heartbeat_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("workers.heartbeat_timeout must be positive");
  }
  if (d.dns_refresh <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("workers.dns_refresh must be positive");
  }
  if (d.backoff_initial <= absl::ZeroDuration() || d.backoff_max < d.backoff_initial) {
    return absl::InvalidArgumentError(
        "workers.backoff_initial must be positive and <= workers.backoff_max");
  }
  for (const std::string& w : d.static_workers) {
    if (w.empty() || w.rfind(':') == std::string::npos) {
      return absl::InvalidArgumentError(
          absl::StrCat("workers.static: '", w, "' is not host:port"));
    }
  }
  for (const std::string& w : d.dns_workers) {
    if (w.empty() || w.rfind(':') == std::string::npos) {
      return absl::InvalidArgumentError(absl::StrCat("workers.dns: '", w, "' is not name:port"));
    }
  }
  RETURN_IF_ERROR(
      internal_tls.Validate("internal_tls.ca", "internal_tls.cert", "internal_tls.key"));
  for (const auto& [what, list] :
       {std::pair<const char*, const std::vector<std::string>*>{"workers.static",
                                                                &d.static_workers},
        {"workers.dns", &d.dns_workers}}) {
    for (const std::string& w : *list) {
      RETURN_IF_ERROR(proto::CheckInternalAddress(what, w, internal_tls.enabled(),
                                                  allow_insecure_internal));
    }
  }
  const LimitsConfig& l = limits;
  if (l.max_inflight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.max_inflight must be >= 1, got ", l.max_inflight));
  }
  if (l.prepare_threads < 1 || l.prepare_threads > 256) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.prepare_threads must be in 1..256, got ", l.prepare_threads));
  }
  if (l.max_prompt_tokens < 0) {
    return absl::InvalidArgumentError("limits.max_prompt_tokens must be >= 0");
  }
  if (l.max_n < 1) {
    return absl::InvalidArgumentError("limits.max_n must be >= 1");
  }
  if (l.max_logprobs < 0 || l.max_logprobs > 20) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.max_logprobs must be in [0, 20], got ", l.max_logprobs));
  }
  if (l.max_stop_strings < 0 || l.max_stop_string_bytes < 1) {
    return absl::InvalidArgumentError(
        "limits.max_stop_strings must be >= 0 and limits.max_stop_string_bytes >= 1");
  }
  if (l.default_max_tokens < 1) {
    return absl::InvalidArgumentError("limits.default_max_tokens must be >= 1");
  }
  if (l.default_timeout <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("limits.default_timeout must be positive");
  }
  if (l.retry_after < absl::ZeroDuration()) {
    return absl::InvalidArgumentError("limits.retry_after must be >= 0");
  }
  if (l.max_body_bytes < 1024) {
    return absl::InvalidArgumentError("limits.max_body_bytes must be >= 1024");
  }
  if (l.max_prompt_bytes < 0) {
    return absl::InvalidArgumentError("limits.max_prompt_bytes must be >= 0");
  }
  for (const auto& [name, value] : {std::pair<const char*, absl::Duration>{"header_timeout",
                                                                             l.header_timeout},
                                    {"body_timeout", l.body_timeout},
                                    {"idle_timeout", l.idle_timeout}}) {
    if (value <= absl::ZeroDuration()) {
      return absl::InvalidArgumentError(absl::StrCat("limits.", name, " must be positive"));
    }
  }
  if (l.max_connections < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.max_connections must be >= 1, got ", l.max_connections));
  }
  if (l.max_stream_buffer_bytes < 4096) {
    return absl::InvalidArgumentError("limits.max_stream_buffer_bytes must be >= 4096");
  }
  if (l.max_grpc_message_bytes < 1024) {
    return absl::InvalidArgumentError("limits.max_grpc_message_bytes must be >= 1024");
  }
  for (size_t i = 0; i < auth.keys_env.size(); ++i) {
    const char ch = auth.keys_env[i];
    if (!(absl::ascii_isalpha(ch) || ch == '_' || (i > 0 && absl::ascii_isdigit(ch)))) {
      return absl::InvalidArgumentError(
          absl::StrCat("auth.keys_env: '", auth.keys_env, "' is not an environment variable name"));
    }
  }
  RETURN_IF_ERROR(admission.Validate());
  RETURN_IF_ERROR(ValidateSemanticCache(*this));
  RETURN_IF_ERROR(routing.Validate());
  for (size_t i = 0; i < models.size() && routing.enabled(); ++i) {
    if (models[i].name == routing.alias) {
      return absl::InvalidArgumentError(absl::StrCat(
          "routing.alias: '", routing.alias, "' is also models[", i,
          "].name; the routed alias needs a name of its own"));
    }
  }
  return absl::OkStatus();
}

absl::Status RoutingConfig::Validate() const {
  if (!enabled()) {
    return absl::OkStatus();
  }
  if (alias.empty()) {
    return absl::InvalidArgumentError("routing.alias is empty");
  }
  if (pools.size() < 2) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing.pools: want at least two pools to route between, got ",
                     pools.size()));
  }
  if (!(embedding_weight >= 0 && embedding_weight <= 1)) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing.embedding_weight must be in [0, 1], got ", embedding_weight));
  }
  if (neighbors < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing.neighbors must be >= 1, got ", neighbors));
  }
  if (!(temperature > 0)) {
    return absl::InvalidArgumentError(
        absl::StrCat("routing.temperature must be > 0, got ", temperature));
  }
  for (size_t i = 0; i < pools.size(); ++i) {
    const RoutingPoolConfig& p = pools[i];
    const std::string at = absl::StrCat("routing.pools[", i, "]");
    if (p.name.empty()) {
      return absl::InvalidArgumentError(absl::StrCat(at, ".name is empty"));
    }
    if (p.model.empty()) {
      return absl::InvalidArgumentError(
          absl::StrCat(at, ".model is empty (want a served model's name)"));
    }
    if (i == 0 && p.min_score != 0) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".min_score must be 0 for the first pool (it takes the lowest scores), got ",
          p.min_score));
    }
    if (i > 0 && !(p.min_score > pools[i - 1].min_score && p.min_score <= 1)) {
      return absl::InvalidArgumentError(absl::StrCat(
          at, ".min_score must be in (", pools[i - 1].min_score,
          ", 1] (above the previous pool's; pools go cheapest first), got ", p.min_score));
    }
    for (size_t j = 0; j < i; ++j) {
      if (pools[j].name == p.name) {
        return absl::InvalidArgumentError(
            absl::StrCat(at, ".name '", p.name, "' is used twice"));
      }
      if (pools[j].model == p.model) {
        return absl::InvalidArgumentError(absl::StrCat(
            at, ".model '", p.model, "' is also routing.pools[", j, "].model"));
      }
    }
  }
  return absl::OkStatus();
}

absl::Status ParseEmbedding(const YAML::Node& root, absl::string_view base_dir,
                            EmbeddingConfig* out) {
  if (!root || !root.IsMap() || !root["embedding"]) return absl::OkStatus();
  YAML::Node e = root["embedding"];
  RETURN_IF_ERROR(CheckKeys(e, "embedding",
                            {"model", "threads", "max_seq_tokens", "max_batch", "precision"}));
  RETURN_IF_ERROR(ReadString(e, "model", "embedding", &out->model));
  RETURN_IF_ERROR(ReadInt32(e, "threads", "embedding", &out->threads));
  RETURN_IF_ERROR(ReadInt32(e, "max_seq_tokens", "embedding", &out->max_seq_tokens));
  RETURN_IF_ERROR(ReadInt32(e, "max_batch", "embedding", &out->max_batch));
  RETURN_IF_ERROR(ReadString(e, "precision", "embedding", &out->precision));
  if (out->precision != "f32" && out->precision != "bf16") {
    return absl::InvalidArgumentError(absl::StrCat("embedding.precision: '", out->precision,
                                                   "' (known: f32, bf16)"));
  }
  if (engine::FindKnownModel(out->model) == nullptr) {  // a name stays a name
    out->model = ResolvePath(out->model, base_dir);
  }
  return absl::OkStatus();
}

absl::Status ParseSemanticCache(const YAML::Node& root, SemanticCacheConfig* out) {
  if (!root || !root.IsMap() || !root["semantic_cache"]) return absl::OkStatus();
  YAML::Node n = root["semantic_cache"];
  const std::string path = "semantic_cache";
  RETURN_IF_ERROR(CheckKeys(n, path,
                            {"enabled", "capacity", "ttl", "threshold", "thresholds", "exact_only"}));
  RETURN_IF_ERROR(ReadBool(n, "enabled", path, &out->enabled));
  RETURN_IF_ERROR(ReadInt32(n, "capacity", path, &out->capacity));
  RETURN_IF_ERROR(ReadDuration(n, "ttl", path, &out->ttl));
  RETURN_IF_ERROR(ReadBool(n, "exact_only", path, &out->exact_only));
  auto read_float = [](const YAML::Node& v, const std::string& where, float* f) {
    double d = 0;
    if (!v.IsScalar() || !absl::SimpleAtod(v.Scalar(), &d)) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": want a number"));
    }
    *f = static_cast<float>(d);
    return absl::OkStatus();
  };
  if (n["threshold"] && !n["threshold"].IsNull()) {
    RETURN_IF_ERROR(read_float(n["threshold"], "semantic_cache.threshold", &out->threshold));
  }
  if (YAML::Node t = n["thresholds"]; t && !t.IsNull()) {
    if (!t.IsMap()) {
      return absl::InvalidArgumentError(
          "semantic_cache.thresholds: want a map {model name: threshold}");
    }
    for (const auto& kv : t) {
      const std::string model = kv.first.as<std::string>("");
      RETURN_IF_ERROR(read_float(kv.second, absl::StrCat("semantic_cache.thresholds.", model),
                                 &out->thresholds[model]));
    }
  }
  return absl::OkStatus();
}

// A number at map[key] (left untouched when absent).
static absl::Status ReadNumber(const YAML::Node& map, const std::string& key,
                               const std::string& path, double* out) {
  std::string text;
  RETURN_IF_ERROR(ReadString(map, key, path, &text));
  if (text.empty()) {
    return absl::OkStatus();
  }
  if (!absl::SimpleAtod(text, out)) {
    return absl::InvalidArgumentError(
        absl::StrCat(internal::JoinPath(path, key), ": want a number, got '", text, "'"));
  }
  return absl::OkStatus();
}

absl::Status ValidateSemanticCache(const RouterConfig& c) {
  const SemanticCacheConfig& s = c.semantic_cache;
  if (!s.enabled) {
    return absl::OkStatus();
  }
  if (s.capacity < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("semantic_cache.capacity must be >= 1, got ", s.capacity));
  }
  if (s.ttl <= absl::ZeroDuration()) {
    return absl::InvalidArgumentError("semantic_cache.ttl must be positive");
  }
  std::map<std::string, float> all = s.thresholds;
  all["threshold"] = s.threshold;
  for (const auto& [name, tau] : all) {
    if (!(tau > 0.0f && tau <= 1.0f)) {
      return absl::InvalidArgumentError(
          absl::StrCat("semantic_cache.", name == "threshold" ? "" : "thresholds.", name,
                       ": a cosine threshold in (0, 1], got ", tau));
    }
  }
  for (const auto& [name, tau] : s.thresholds) {
    bool served = false;
    for (const ServedModelConfig& m : c.models) {
      served = served || m.name == name;
    }
    if (!served) {
      return absl::InvalidArgumentError(absl::StrCat(
          "semantic_cache.thresholds.", name, ": no served model has this name (models[].name)"));
    }
  }
  if (!s.exact_only && c.embedding.model.empty()) {
    return absl::InvalidArgumentError(
        "semantic_cache: the vector tier needs embedding.model (e.g. all-minilm-l6-v2); or set "
        "semantic_cache.exact_only: true");
  }
  return absl::OkStatus();
}

absl::Status ParseRouting(const YAML::Node& root, absl::string_view base_dir, RoutingConfig* out) {
  if (!root || !root.IsMap() || !root["routing"]) {
    return absl::OkStatus();
  }
  YAML::Node r = root["routing"];
  RETURN_IF_ERROR(CheckKeys(r, "routing",
                            {"alias", "embedding_weight", "neighbors", "temperature", "pools"}));
  RETURN_IF_ERROR(ReadString(r, "alias", "routing", &out->alias));
  RETURN_IF_ERROR(ReadNumber(r, "embedding_weight", "routing", &out->embedding_weight));
  RETURN_IF_ERROR(ReadInt32(r, "neighbors", "routing", &out->neighbors));
  RETURN_IF_ERROR(ReadNumber(r, "temperature", "routing", &out->temperature));
  if (!r.IsMap() || !r["pools"]) {
    return absl::OkStatus();
  }
  YAML::Node pools = r["pools"];
  if (!pools.IsSequence()) {
    return absl::InvalidArgumentError(
        "routing.pools: want a list of {name, model, min_score, exemplars, exemplars_file}");
  }
  for (size_t i = 0; i < pools.size(); ++i) {
    const std::string at = absl::StrCat("routing.pools[", i, "]");
    YAML::Node p = pools[i];
    RETURN_IF_ERROR(
        CheckKeys(p, at, {"name", "model", "min_score", "exemplars", "exemplars_file"}));
    RoutingPoolConfig pc;
    RETURN_IF_ERROR(ReadString(p, "name", at, &pc.name));
    RETURN_IF_ERROR(ReadString(p, "model", at, &pc.model));
    RETURN_IF_ERROR(ReadNumber(p, "min_score", at, &pc.min_score));
    RETURN_IF_ERROR(ReadStringList(p, "exemplars", at, &pc.exemplars));
    RETURN_IF_ERROR(ReadString(p, "exemplars_file", at, &pc.exemplars_file));
    pc.exemplars_file = ResolvePath(pc.exemplars_file, base_dir);
    out->pools.push_back(std::move(pc));
  }
  return absl::OkStatus();
}

absl::StatusOr<RouterConfig> ParseRouterConfigYaml(absl::string_view yaml,
                                                   absl::string_view base_dir) {
  ASSIGN_OR_RETURN(YAML::Node root, internal::LoadYaml(yaml));
  RouterConfig c;
  RETURN_IF_ERROR(CheckKeys(root, "",
                            {"grpc_address", "http_address", "mode", "max_route_attempts",
                             "http_threads", "http_backlog", "models", "workers", "internal_tls",
                             "allow_insecure_internal", "limits", "auth",
                             "expose_route_workers", "embedding",
                             "semantic_cache", "routing", "placement",
                             "admission"}));
  RETURN_IF_ERROR(ReadString(root, "grpc_address", "", &c.grpc_address));
  RETURN_IF_ERROR(ReadString(root, "http_address", "", &c.http_address));
  std::string mode(RoutingModeName(c.mode));
  RETURN_IF_ERROR(ReadString(root, "mode", "", &mode));
  ASSIGN_OR_RETURN(c.mode, ParseRoutingMode(mode));
  RETURN_IF_ERROR(ReadInt32(root, "max_route_attempts", "", &c.max_route_attempts));
  RETURN_IF_ERROR(ReadInt32(root, "http_threads", "", &c.http_threads));
  RETURN_IF_ERROR(ReadBool(root, "expose_route_workers", "", &c.expose_route_workers));
  RETURN_IF_ERROR(
      internal::ReadBool(root, "allow_insecure_internal", "", &c.allow_insecure_internal));
  RETURN_IF_ERROR(ReadInt32(root, "http_backlog", "", &c.http_backlog));
  RETURN_IF_ERROR(ReadPlacement(root, c));

  if (root && root.IsMap() && root["models"]) {
    YAML::Node models = root["models"];
    if (!models.IsSequence()) {
      return absl::InvalidArgumentError("models: want a list of {name, path, chat_template}");
    }
    for (size_t i = 0; i < models.size(); ++i) {
      std::string path = absl::StrCat("models[", i, "]");
      YAML::Node m = models[i];
      RETURN_IF_ERROR(CheckKeys(m, path, {"name", "path", "chat_template", "worker_model"}));
      ServedModelConfig mc;
      RETURN_IF_ERROR(ReadString(m, "name", path, &mc.name));
      RETURN_IF_ERROR(ReadString(m, "path", path, &mc.path));
      RETURN_IF_ERROR(ReadString(m, "chat_template", path, &mc.chat_template));
      RETURN_IF_ERROR(ReadString(m, "worker_model", path, &mc.worker_model));
      if (engine::FindKnownModel(mc.path) == nullptr) {  // a name stays a name
        mc.path = ResolvePath(mc.path, base_dir);
      }
      c.models.push_back(std::move(mc));
    }
  }

  if (root && root.IsMap() && root["workers"]) {
    YAML::Node w = root["workers"];
    RETURN_IF_ERROR(CheckKeys(w, "workers",
                              {"static", "dns", "dns_refresh", "heartbeat_timeout",
                               "backoff_initial", "backoff_max"}));
    DiscoveryConfig& d = c.discovery;
    RETURN_IF_ERROR(ReadStringList(w, "static", "workers", &d.static_workers));
    RETURN_IF_ERROR(ReadStringList(w, "dns", "workers", &d.dns_workers));
    RETURN_IF_ERROR(ReadDuration(w, "dns_refresh", "workers", &d.dns_refresh));
    RETURN_IF_ERROR(ReadDuration(w, "heartbeat_timeout", "workers", &d.heartbeat_timeout));
    RETURN_IF_ERROR(ReadDuration(w, "backoff_initial", "workers", &d.backoff_initial));
    RETURN_IF_ERROR(ReadDuration(w, "backoff_max", "workers", &d.backoff_max));
  }

  if (root && root.IsMap() && root["internal_tls"]) {
    RETURN_IF_ERROR(
        internal::ReadTlsFiles(root["internal_tls"], "internal_tls", base_dir, &c.internal_tls));
  }

  if (root && root.IsMap() && root["limits"]) {
    YAML::Node l = root["limits"];
    RETURN_IF_ERROR(CheckKeys(l, "limits",
                              {"max_inflight", "prepare_threads", "retry_after", "max_prompt_tokens", "max_n",
                               "max_logprobs", "max_stop_strings", "max_stop_string_bytes",
                               "default_max_tokens", "default_timeout", "max_body_bytes",
                               "max_prompt_bytes", "header_timeout", "body_timeout",
                               "idle_timeout", "max_connections", "max_stream_buffer_bytes",
                               "max_grpc_message_bytes", "parse_special_in_content"}));
    LimitsConfig& x = c.limits;
    RETURN_IF_ERROR(ReadInt32(l, "max_inflight", "limits", &x.max_inflight));
    RETURN_IF_ERROR(ReadInt32(l, "prepare_threads", "limits", &x.prepare_threads));
    RETURN_IF_ERROR(ReadDuration(l, "retry_after", "limits", &x.retry_after));
    RETURN_IF_ERROR(ReadInt32(l, "max_prompt_tokens", "limits", &x.max_prompt_tokens));
    RETURN_IF_ERROR(ReadInt32(l, "max_n", "limits", &x.max_n));
    RETURN_IF_ERROR(ReadInt32(l, "max_logprobs", "limits", &x.max_logprobs));
    RETURN_IF_ERROR(ReadInt32(l, "max_stop_strings", "limits", &x.max_stop_strings));
    RETURN_IF_ERROR(ReadInt32(l, "max_stop_string_bytes", "limits", &x.max_stop_string_bytes));
    RETURN_IF_ERROR(ReadInt32(l, "default_max_tokens", "limits", &x.default_max_tokens));
    RETURN_IF_ERROR(ReadDuration(l, "default_timeout", "limits", &x.default_timeout));
    RETURN_IF_ERROR(ReadInt(l, "max_body_bytes", "limits", &x.max_body_bytes));
    RETURN_IF_ERROR(ReadInt(l, "max_prompt_bytes", "limits", &x.max_prompt_bytes));
    RETURN_IF_ERROR(ReadDuration(l, "header_timeout", "limits", &x.header_timeout));
    RETURN_IF_ERROR(ReadDuration(l, "body_timeout", "limits", &x.body_timeout));
    RETURN_IF_ERROR(ReadDuration(l, "idle_timeout", "limits", &x.idle_timeout));
    RETURN_IF_ERROR(ReadInt32(l, "max_connections", "limits", &x.max_connections));
    RETURN_IF_ERROR(
        ReadInt(l, "max_stream_buffer_bytes", "limits", &x.max_stream_buffer_bytes));
    RETURN_IF_ERROR(
        ReadInt32(l, "max_grpc_message_bytes", "limits", &x.max_grpc_message_bytes));
    RETURN_IF_ERROR(
        ReadBool(l, "parse_special_in_content", "limits", &x.parse_special_in_content));
  }

  if (root && root.IsMap() && root["auth"]) {
    YAML::Node a = root["auth"];
    RETURN_IF_ERROR(
        CheckKeys(a, "auth", {"keys_file", "keys_env", "public_health", "public_metrics"}));
    AuthConfig& x = c.auth;
    RETURN_IF_ERROR(ReadString(a, "keys_file", "auth", &x.keys_file));
    RETURN_IF_ERROR(ReadString(a, "keys_env", "auth", &x.keys_env));
    RETURN_IF_ERROR(ReadBool(a, "public_health", "auth", &x.public_health));
    RETURN_IF_ERROR(ReadBool(a, "public_metrics", "auth", &x.public_metrics));
    x.keys_file = ResolvePath(x.keys_file, base_dir);
  }
  RETURN_IF_ERROR(ParseEmbedding(root, base_dir, &c.embedding));
  RETURN_IF_ERROR(ParseSemanticCache(root, &c.semantic_cache));
  RETURN_IF_ERROR(ParseRouting(root, base_dir, &c.routing));
  if (root && root.IsMap() && root["admission"]) {
    RETURN_IF_ERROR(ParseAdmission(root["admission"], &c.admission));
  }
  return c;
}

}  // namespace tandem::router
