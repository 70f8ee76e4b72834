#include "router/config.h"

#include <filesystem>

#include "absl/strings/str_cat.h"
#include "common/base/status_macros.h"
#include "common/engine/model_store.h"
#include "router/internal/yaml_util.h"

namespace tandem::router {

using internal::CheckKeys;
using internal::ReadDuration;
using internal::ReadInt;
using internal::ReadInt32;
using internal::ReadString;
using internal::ReadStringList;

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
  const LimitsConfig& l = limits;
  if (l.max_inflight < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat("limits.max_inflight must be >= 1, got ", l.max_inflight));
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
  if (l.max_grpc_message_bytes < 1024) {
    return absl::InvalidArgumentError("limits.max_grpc_message_bytes must be >= 1024");
  }
  return absl::OkStatus();
}

absl::StatusOr<RouterConfig> ParseRouterConfigYaml(absl::string_view yaml,
                                                   absl::string_view base_dir) {
  ASSIGN_OR_RETURN(YAML::Node root, internal::LoadYaml(yaml));
  RouterConfig c;
  RETURN_IF_ERROR(CheckKeys(root, "",
                            {"grpc_address", "http_address", "mode", "max_route_attempts",
                             "http_threads", "models", "workers", "limits"}));
  RETURN_IF_ERROR(ReadString(root, "grpc_address", "", &c.grpc_address));
  RETURN_IF_ERROR(ReadString(root, "http_address", "", &c.http_address));
  std::string mode(RoutingModeName(c.mode));
  RETURN_IF_ERROR(ReadString(root, "mode", "", &mode));
  ASSIGN_OR_RETURN(c.mode, ParseRoutingMode(mode));
  RETURN_IF_ERROR(ReadInt32(root, "max_route_attempts", "", &c.max_route_attempts));
  RETURN_IF_ERROR(ReadInt32(root, "http_threads", "", &c.http_threads));

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
      if (!mc.path.empty() && !base_dir.empty() && std::filesystem::path(mc.path).is_relative() &&
          engine::FindKnownModel(mc.path) == nullptr) {
        mc.path = (std::filesystem::path(std::string(base_dir)) / mc.path).lexically_normal();
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

  if (root && root.IsMap() && root["limits"]) {
    YAML::Node l = root["limits"];
    RETURN_IF_ERROR(CheckKeys(l, "limits",
                              {"max_inflight", "retry_after", "max_prompt_tokens", "max_n",
                               "max_logprobs", "max_stop_strings", "max_stop_string_bytes",
                               "default_max_tokens", "default_timeout", "max_body_bytes",
                               "max_grpc_message_bytes"}));
    LimitsConfig& x = c.limits;
    RETURN_IF_ERROR(ReadInt32(l, "max_inflight", "limits", &x.max_inflight));
    RETURN_IF_ERROR(ReadDuration(l, "retry_after", "limits", &x.retry_after));
    RETURN_IF_ERROR(ReadInt32(l, "max_prompt_tokens", "limits", &x.max_prompt_tokens));
    RETURN_IF_ERROR(ReadInt32(l, "max_n", "limits", &x.max_n));
    RETURN_IF_ERROR(ReadInt32(l, "max_logprobs", "limits", &x.max_logprobs));
    RETURN_IF_ERROR(ReadInt32(l, "max_stop_strings", "limits", &x.max_stop_strings));
    RETURN_IF_ERROR(ReadInt32(l, "max_stop_string_bytes", "limits", &x.max_stop_string_bytes));
    RETURN_IF_ERROR(ReadInt32(l, "default_max_tokens", "limits", &x.default_max_tokens));
    RETURN_IF_ERROR(ReadDuration(l, "default_timeout", "limits", &x.default_timeout));
    RETURN_IF_ERROR(ReadInt(l, "max_body_bytes", "limits", &x.max_body_bytes));
    RETURN_IF_ERROR(
        ReadInt32(l, "max_grpc_message_bytes", "limits", &x.max_grpc_message_bytes));
  }
  return c;
}

}  // namespace tandem::router
