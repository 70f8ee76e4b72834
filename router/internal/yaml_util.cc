#include "router/internal/yaml_util.h"

#include <exception>
#include <filesystem>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace tandem::router::internal {
namespace {

absl::Status TypeError(const std::string& path, absl::string_view want, const YAML::Node& n) {
  return absl::InvalidArgumentError(
      absl::StrCat(path, ": want ", want, ", got '", n.IsScalar() ? n.Scalar() : "(non-scalar)",
                   "' (line ", n.Mark().line + 1, ")"));
}

// The scalar at map[key], or nullptr-equivalent (IsDefined false) when absent.
absl::StatusOr<YAML::Node> Child(const YAML::Node& map, const std::string& key,
                                 const std::string& path) {
  if (!map || map.IsNull()) {
    return YAML::Node();
  }
  if (!map.IsMap()) {
    return absl::InvalidArgumentError(absl::StrCat(path.empty() ? "document" : path,
                                                   ": want a map"));
  }
  try {
    return map[key];
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat(JoinPath(path, key), ": ", e.what()));
  }
}

}  // namespace

std::string JoinPath(const std::string& path, const std::string& key) {
  return path.empty() ? key : absl::StrCat(path, ".", key);
}

absl::StatusOr<YAML::Node> LoadYaml(absl::string_view text) {
  try {
    return YAML::Load(std::string(text));
  } catch (const YAML::Exception& e) {
    return absl::InvalidArgumentError(
        absl::StrCat("YAML syntax error at line ", e.mark.line + 1, ", column ",
                     e.mark.column + 1, ": ", e.msg));
  } catch (const std::exception& e) {
    return absl::InvalidArgumentError(absl::StrCat("YAML: ", e.what()));
  }
}

absl::Status CheckKeys(const YAML::Node& node, const std::string& path,
                       const std::vector<std::string>& allowed) {
  if (!node || node.IsNull()) {
    return absl::OkStatus();
  }
  if (!node.IsMap()) {
    return absl::InvalidArgumentError(
        absl::StrCat(path.empty() ? "document" : path, ": want a map"));
  }
  for (const auto& kv : node) {
    std::string key = kv.first.IsScalar() ? kv.first.Scalar() : "";
    bool ok = false;
    for (const std::string& a : allowed) {
      ok = ok || a == key;
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat("unknown key '", JoinPath(path, key),
                                                     "' (known: ", absl::StrJoin(allowed, ", "),
                                                     ")"));
    }
  }
  return absl::OkStatus();
}

absl::Status ReadString(const YAML::Node& map, const std::string& key, const std::string& path,
                        std::string* out) {
  absl::StatusOr<YAML::Node> n = Child(map, key, path);
  if (!n.ok()) {
    return n.status();
  }
  if (!n->IsDefined() || n->IsNull()) {
    return absl::OkStatus();
  }
  if (!n->IsScalar()) {
    return TypeError(JoinPath(path, key), "a string", *n);
  }
  *out = n->Scalar();
  return absl::OkStatus();
}

absl::Status ReadInt(const YAML::Node& map, const std::string& key, const std::string& path,
                     int64_t* out) {
  absl::StatusOr<YAML::Node> n = Child(map, key, path);
  if (!n.ok()) {
    return n.status();
  }
  if (!n->IsDefined() || n->IsNull()) {
    return absl::OkStatus();
  }
  if (!n->IsScalar() || !absl::SimpleAtoi(n->Scalar(), out)) {
    return TypeError(JoinPath(path, key), "an integer", *n);
  }
  return absl::OkStatus();
}

absl::Status ReadInt32(const YAML::Node& map, const std::string& key, const std::string& path,
                       int32_t* out) {
  int64_t v = *out;
  absl::Status s = ReadInt(map, key, path, &v);
  if (!s.ok()) {
    return s;
  }
  if (v < INT32_MIN || v > INT32_MAX) {
    return absl::InvalidArgumentError(absl::StrCat(JoinPath(path, key), ": ", v,
                                                   " is out of range"));
  }
  *out = static_cast<int32_t>(v);
  return absl::OkStatus();
}

absl::Status ReadBool(const YAML::Node& map, const std::string& key, const std::string& path,
                      bool* out) {
  absl::StatusOr<YAML::Node> n = Child(map, key, path);
  if (!n.ok()) {
    return n.status();
  }
  if (!n->IsDefined() || n->IsNull()) {
    return absl::OkStatus();
  }
  if (!n->IsScalar() || !absl::SimpleAtob(n->Scalar(), out)) {
    return TypeError(JoinPath(path, key), "true or false", *n);
  }
  return absl::OkStatus();
}

absl::Status ReadDuration(const YAML::Node& map, const std::string& key, const std::string& path,
                          absl::Duration* out) {
  absl::StatusOr<YAML::Node> n = Child(map, key, path);
  if (!n.ok()) {
    return n.status();
  }
  if (!n->IsDefined() || n->IsNull()) {
    return absl::OkStatus();
  }
  double seconds = 0;
  if (n->IsScalar() && absl::SimpleAtod(n->Scalar(), &seconds)) {
    *out = absl::Seconds(seconds);
    return absl::OkStatus();
  }
  if (!n->IsScalar() || !absl::ParseDuration(n->Scalar(), out)) {
    return TypeError(JoinPath(path, key), "a duration such as 3s or 250ms", *n);
  }
  return absl::OkStatus();
}

absl::Status ReadStringList(const YAML::Node& map, const std::string& key,
                            const std::string& path, std::vector<std::string>* out) {
  absl::StatusOr<YAML::Node> n = Child(map, key, path);
  if (!n.ok()) {
    return n.status();
  }
  if (!n->IsDefined() || n->IsNull()) {
    return absl::OkStatus();
  }
  if (n->IsScalar()) {
    out->assign(1, n->Scalar());
    return absl::OkStatus();
  }
  if (!n->IsSequence()) {
    return TypeError(JoinPath(path, key), "a list of strings", *n);
  }
  out->clear();
  for (size_t i = 0; i < n->size(); ++i) {
    YAML::Node e = (*n)[i];
    if (!e.IsScalar()) {
      return TypeError(absl::StrCat(JoinPath(path, key), "[", i, "]"), "a string", e);
    }
    out->push_back(e.Scalar());
  }
  return absl::OkStatus();
}

absl::Status ReadTlsFiles(const YAML::Node& node, const std::string& path,
                          absl::string_view base_dir, proto::TlsFiles* out) {
  if (absl::Status s = CheckKeys(node, path, {"ca", "cert", "key"}); !s.ok()) {
    return s;
  }
  for (const auto& [key, field] : {std::pair<const char*, std::string*>{"ca", &out->ca_file},
                                   {"cert", &out->cert_file},
                                   {"key", &out->key_file}}) {
    if (absl::Status s = ReadString(node, key, path, field); !s.ok()) {
      return s;
    }
    if (!field->empty() && !base_dir.empty() && std::filesystem::path(*field).is_relative()) {
      *field = (std::filesystem::path(std::string(base_dir)) / *field).lexically_normal();
    }
  }
  return absl::OkStatus();
}

}  // namespace tandem::router::internal
