#include "common/serving/worker_config.h"

#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/status_macros.h"

namespace tandem::serving {
namespace {

absl::Status BadValue(absl::string_view key, absl::string_view value, absl::string_view want) {
  return absl::InvalidArgumentError(
      absl::StrCat("config key '", key, "': bad value '", value, "' (want ", want, ")"));
}

absl::Status ParseInt32(absl::string_view key, absl::string_view value, int32_t* out) {
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), out)) {
    return BadValue(key, value, "an integer");
  }
  return absl::OkStatus();
}

absl::Status ParseInt64(absl::string_view key, absl::string_view value, int64_t* out) {
  if (!absl::SimpleAtoi(absl::StripAsciiWhitespace(value), out)) {
    return BadValue(key, value, "an integer");
  }
  return absl::OkStatus();
}

absl::Status ParseBool(absl::string_view key, absl::string_view value, bool* out) {
  if (!absl::SimpleAtob(absl::StripAsciiWhitespace(value), out)) {
    return BadValue(key, value, "true or false");
  }
  return absl::OkStatus();
}

absl::Status ParseDurationValue(absl::string_view key, absl::string_view value,
                                absl::Duration* out) {
  if (!absl::ParseDuration(std::string(absl::StripAsciiWhitespace(value)), out)) {
    return BadValue(key, value, "a duration such as 30s or 500ms");
  }
  return absl::OkStatus();
}

}  // namespace

const char* WorkerRoleName(WorkerRole role) {
  switch (role) {
    case WorkerRole::kPrefill:
      return "prefill";
    case WorkerRole::kDecode:
      return "decode";
    case WorkerRole::kColocated:
      return "colocated";
  }
  return "unknown";
}

const std::vector<std::string>& WorkerConfig::Keys() {
  static const auto* keys = new std::vector<std::string>{
      "worker_id",       "role",           "model",          "listen",
      "advertise",       "metrics_port",   "metrics_host",   "tls_ca",
      "tls_cert",        "tls_key",        "allow_insecure_internal", "threads",
      "kv_cache_bytes",  "kv_blocks",      "block_size",     "kv_dtype",
      "prefix_cache",    "chunk_size",     "token_budget",   "max_running",
      "max_queued",      "transport",      "transport_mode", "ucx_tls",
      "ucx_net_devices", "reservation_deadline", "drain_grace", "heartbeat_interval",
      "liveness_timeout"};
  return *keys;
}

absl::Status WorkerConfig::Set(absl::string_view key, absl::string_view value) {
  if (key == "worker_id") {
    worker_id = std::string(value);
  } else if (key == "role") {
    std::string v = absl::AsciiStrToLower(value);
    if (v == "prefill") {
      role = WorkerRole::kPrefill;
    } else if (v == "decode") {
      role = WorkerRole::kDecode;
    } else if (v == "colocated") {
      role = WorkerRole::kColocated;
    } else {
      return BadValue(key, value, "prefill, decode or colocated");
    }
  } else if (key == "model") {
    model = std::string(value);
  } else if (key == "listen") {
    listen = std::string(value);
  } else if (key == "advertise") {
    advertise = std::string(value);
  } else if (key == "metrics_port") {
    return ParseInt32(key, value, &metrics_port);
  } else if (key == "metrics_host") {
    metrics_host = std::string(value);
  } else if (key == "tls_ca") {
    tls_ca = std::string(value);
  } else if (key == "tls_cert") {
    tls_cert = std::string(value);
  } else if (key == "tls_key") {
    tls_key = std::string(value);
  } else if (key == "allow_insecure_internal") {
    return ParseBool(key, value, &allow_insecure_internal);
  } else if (key == "threads") {
    return ParseInt32(key, value, &threads);
  } else if (key == "kv_cache_bytes") {
    return ParseInt64(key, value, &kv_cache_bytes);
  } else if (key == "kv_blocks") {
    return ParseInt32(key, value, &kv_blocks);
  } else if (key == "block_size") {
    return ParseInt32(key, value, &block_size);
  } else if (key == "kv_dtype") {
    std::string v = absl::AsciiStrToLower(value);
    if (v == "f32") {
      kv_dtype = engine::GgmlType::kF32;
    } else if (v == "f16") {
      kv_dtype = engine::GgmlType::kF16;
    } else {
      return BadValue(key, value, "f32 or f16");
    }
  } else if (key == "prefix_cache") {
    return ParseBool(key, value, &prefix_cache);
  } else if (key == "chunk_size") {
    return ParseInt32(key, value, &chunk_size);
  } else if (key == "token_budget") {
    return ParseInt32(key, value, &token_budget);
  } else if (key == "max_running") {
    return ParseInt32(key, value, &max_running);
  } else if (key == "max_queued") {
    return ParseInt32(key, value, &max_queued);
  } else if (key == "transport") {
    transport = std::string(value);
  } else if (key == "transport_mode") {
    transport_mode = std::string(value);
  } else if (key == "ucx_tls") {
    ucx_tls = std::string(value);
  } else if (key == "ucx_net_devices") {
    ucx_net_devices = std::string(value);
  } else if (key == "reservation_deadline") {
    return ParseDurationValue(key, value, &reservation_deadline);
  } else if (key == "drain_grace") {
    return ParseDurationValue(key, value, &drain_grace);
  } else if (key == "heartbeat_interval") {
    return ParseDurationValue(key, value, &heartbeat_interval);
  } else if (key == "liveness_timeout") {
    return ParseDurationValue(key, value, &liveness_timeout);
  } else {
    return absl::InvalidArgumentError(absl::StrCat("unknown config key '", key, "' (known: ",
                                                   absl::StrJoin(Keys(), ", "), ")"));
  }
  return absl::OkStatus();
}

absl::Status WorkerConfig::ApplyYaml(absl::string_view yaml_text) {
  // yaml-cpp throws; wrap it here so callers see a Status.
  YAML::Node root;
  try {
    root = YAML::Load(std::string(yaml_text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("config YAML: ", e.what()));
  }
  if (root.IsNull()) {
    return absl::OkStatus();  // an empty file sets nothing
  }
  if (!root.IsMap()) {
    return absl::InvalidArgumentError("config YAML: the top level must be a mapping of key: value");
  }
  for (const auto& kv : root) {
    std::string key;
    try {
      key = kv.first.as<std::string>();
    } catch (const YAML::Exception& e) {
      return absl::InvalidArgumentError(absl::StrCat("config YAML: bad key: ", e.what()));
    }
    if (kv.second.IsNull()) {
      RETURN_IF_ERROR(Set(key, ""));
      continue;
    }
    if (!kv.second.IsScalar()) {
      return absl::InvalidArgumentError(
          absl::StrCat("config key '", key, "' (line ", kv.second.Mark().line + 1,
                       "): want a scalar value"));
    }
    RETURN_IF_ERROR(Set(key, kv.second.Scalar()));
  }
  return absl::OkStatus();
}

absl::Status WorkerConfig::ApplyYamlFile(const std::string& path) {
  std::ifstream in(path);
  if (!in) {
    return absl::NotFoundError(absl::StrCat("cannot read config file ", path));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  return base::Annotate(ApplyYaml(ss.str()), path);
}

absl::Status WorkerConfig::Validate() const {
  auto bad = [](absl::string_view field, auto value, absl::string_view want) {
    return absl::InvalidArgumentError(
        absl::StrCat("config: ", field, " = ", value, " (want ", want, ")"));
  };
  if (model.empty()) {
    return absl::InvalidArgumentError("config: model is required (a GGUF path)");
  }
  if (listen.empty()) {
    return absl::InvalidArgumentError("config: listen is required (host:port)");
  }
  RETURN_IF_ERROR(tls().Validate("tls_ca", "tls_cert", "tls_key"));
  RETURN_IF_ERROR(proto::CheckInternalAddress("config: listen", listen, tls().enabled(),
                                              allow_insecure_internal));
  if (metrics_port < -1 || metrics_port > 65535) {
    return bad("metrics_port", metrics_port, "-1 (off), 0 (any) or a port");
  }
  if (threads < 0) return bad("threads", threads, ">= 0");
  if (kv_blocks < 0) return bad("kv_blocks", kv_blocks, ">= 0");
  if (kv_blocks == 0 && kv_cache_bytes <= 0) {
    return bad("kv_cache_bytes", kv_cache_bytes, "> 0 when kv_blocks is 0");
  }
  if (block_size <= 0) return bad("block_size", block_size, "> 0");
  if (chunk_size <= 0) return bad("chunk_size", chunk_size, "> 0");
  if (token_budget <= 0) return bad("token_budget", token_budget, "> 0");
  if (max_running <= 0) return bad("max_running", max_running, "> 0");
  if (max_queued < 0) return bad("max_queued", max_queued, ">= 0");
  if (transport != "ucx" && transport != "loopback") {
    return bad("transport", transport, "ucx or loopback");
  }
  if (transport_mode != "auto" && transport_mode != "put" && transport_mode != "am") {
    return bad("transport_mode", transport_mode, "auto, put or am");
  }
  if (reservation_deadline <= absl::ZeroDuration()) {
    return bad("reservation_deadline", absl::FormatDuration(reservation_deadline), "> 0");
  }
  if (drain_grace < absl::ZeroDuration()) {
    return bad("drain_grace", absl::FormatDuration(drain_grace), ">= 0");
  }
  if (heartbeat_interval <= absl::ZeroDuration()) {
    return bad("heartbeat_interval", absl::FormatDuration(heartbeat_interval), "> 0");
  }
  if (liveness_timeout <= absl::ZeroDuration()) {
    return bad("liveness_timeout", absl::FormatDuration(liveness_timeout), "> 0");
  }
  return ToEngineConfig().Validate();
}

engine::EngineConfig WorkerConfig::ToEngineConfig() const {
  engine::EngineConfig e;
  e.num_threads = threads;
  e.num_kv_blocks = kv_blocks;
  e.kv_cache_bytes = kv_cache_bytes;
  e.block_size = block_size;
  e.kv_dtype = kv_dtype;
  e.enable_prefix_cache = prefix_cache;
  return e;
}

std::string WorkerConfig::AdvertiseAddress(int bound_port) const {
  if (!advertise.empty()) {
    return advertise;
  }
  std::string host = listen;
  const size_t colon = listen.rfind(':');
  if (colon != std::string::npos) {
    host = listen.substr(0, colon);
  }
  if (host.empty() || host == "0.0.0.0" || host == "[::]" || host == "::") {
    char name[256] = {0};
    if (gethostname(name, sizeof(name) - 1) == 0 && name[0] != 0) {
      host = name;
    } else {
      host = "localhost";
    }
  }
  return absl::StrCat(host, ":", bound_port);
}

std::string WorkerConfig::WorkerId(int bound_port) const {
  if (!worker_id.empty()) {
    return worker_id;
  }
  return absl::StrCat(WorkerRoleName(role), "@", AdvertiseAddress(bound_port));
}

}  // namespace tandem::serving
