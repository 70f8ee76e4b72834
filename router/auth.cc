#include "router/auth.h"

#include <openssl/crypto.h>
#include <openssl/evp.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "router/api_error.h"
#include "router/internal/yaml_util.h"

namespace tandem::router {
namespace {

constexpr size_t kMinKeyBytes = 16;
constexpr size_t kMaxKeyBytes = 256;
constexpr size_t kMaxTenantBytes = 64;

absl::Status CheckTenantName(absl::string_view name, absl::string_view where) {
  if (name.empty() || name.size() > kMaxTenantBytes) {
    return absl::InvalidArgumentError(
        absl::StrCat(where, ": the tenant name must be 1..", kMaxTenantBytes, " characters"));
  }
  for (char c : name) {
    if (!absl::ascii_isalnum(c) && c != '.' && c != '_' && c != '-') {
      return absl::InvalidArgumentError(absl::StrCat(
          where, ": tenant '", name, "' may hold only letters, digits, '.', '_' and '-'"));
    }
  }
  return absl::OkStatus();
}

// Says what is wrong with a key without quoting it.
absl::Status CheckKey(absl::string_view key, absl::string_view where) {
  if (key.size() < kMinKeyBytes || key.size() > kMaxKeyBytes) {
    return absl::InvalidArgumentError(absl::StrCat(where, ": the key must be ", kMinKeyBytes, "..",
                                                   kMaxKeyBytes, " bytes, got ", key.size()));
  }
  for (char c : key) {
    if (c <= ' ' || c > '~') {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": the key may hold only printable ASCII without spaces"));
    }
  }
  return absl::OkStatus();
}

std::array<uint8_t, 32> Sha256(absl::string_view data) {
  std::array<uint8_t, 32> out{};
  unsigned int len = 0;
  // EVP_Digest fails only on allocation failure, which OpenSSL treats as fatal elsewhere too.
  CHECK(EVP_Digest(data.data(), data.size(), out.data(), &len, EVP_sha256(), nullptr) == 1 &&
        len == out.size());
  return out;
}

absl::Status Unauthenticated(absl::string_view message) {
  return WithErrorCode(absl::UnauthenticatedError(message), "invalid_api_key");
}

}  // namespace

absl::StatusOr<ApiKeys> ApiKeys::Load(const AuthConfig& config, absl::string_view env_value) {
  ApiKeys keys;
  keys.public_health_ = config.public_health;
  keys.public_metrics_ = config.public_metrics;
  if (!config.keys_file.empty()) {
    std::ifstream in(config.keys_file);
    if (!in) {
      return absl::NotFoundError(absl::StrCat("auth.keys_file: cannot read ", config.keys_file));
    }
    std::stringstream text;
    text << in.rdbuf();
    RETURN_IF_ERROR(keys.AddKeyFile(text.str(), config.keys_file));
    if (!keys.enabled()) {
      return absl::InvalidArgumentError(
          absl::StrCat("auth.keys_file: ", config.keys_file, " lists no tenant"));
    }
  }
  RETURN_IF_ERROR(keys.AddKeyList(env_value, config.keys_env));
  return keys;
}

absl::Status ApiKeys::AddKeyFile(absl::string_view yaml, absl::string_view source) {
  absl::StatusOr<YAML::Node> root = internal::LoadYaml(yaml);
  if (!root.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", root.status().message()));
  }
  if (absl::Status s = internal::CheckKeys(*root, "", {"tenants"}); !s.ok()) {
    return absl::InvalidArgumentError(absl::StrCat(source, ": ", s.message()));
  }
  YAML::Node tenants = root->IsMap() ? (*root)["tenants"] : YAML::Node();
  if (!tenants || tenants.IsNull()) {
    return absl::OkStatus();
  }
  if (!tenants.IsSequence()) {
    return absl::InvalidArgumentError(absl::StrCat(
        source, ": tenants (line ", tenants.Mark().line + 1, "): want a list of {name, key}"));
  }
  for (size_t i = 0; i < tenants.size(); ++i) {
    const YAML::Node t = tenants[i];
    const std::string path = absl::StrCat("tenants[", i, "]");
    const std::string where = absl::StrCat(source, ": ", path, " (line ", t.Mark().line + 1, ")");
    if (absl::Status s = internal::CheckKeys(t, path, {"name", "key", "key_sha256"}); !s.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", s.message()));
    }
    if (!t.IsMap() || !t["name"] || !t["name"].IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": name is missing"));
    }
    const std::string name = t["name"].Scalar();
    const bool has_key = t["key"].IsDefined();
    const bool has_digest = t["key_sha256"].IsDefined();
    if (has_key == has_digest) {
      return absl::InvalidArgumentError(
          absl::StrCat(where, ": give exactly one of key and key_sha256"));
    }
    const absl::string_view field = has_key ? "key" : "key_sha256";
    const YAML::Node value = t[std::string(field)];
    if (!value.IsScalar()) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": ", field, " is not a string"));
    }
    RETURN_IF_ERROR(CheckTenantName(name, absl::StrCat(where, ": name")));
    const std::string field_where = absl::StrCat(where, ": ", field);
    if (has_key) {
      RETURN_IF_ERROR(CheckKey(value.Scalar(), field_where));
      RETURN_IF_ERROR(AddDigest(name, Sha256(value.Scalar()), where));
      continue;
    }
    const std::string hex = absl::AsciiStrToLower(value.Scalar());
    Digest digest{};
    bool ok = hex.size() == 2 * digest.size();
    for (size_t b = 0; ok && b < digest.size(); ++b) {
      const char hi = hex[2 * b];
      const char lo = hex[2 * b + 1];
      ok = absl::ascii_isxdigit(hi) && absl::ascii_isxdigit(lo);
      auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
      digest[b] = static_cast<uint8_t>(nibble(hi) << 4 | nibble(lo));
    }
    if (!ok) {
      return absl::InvalidArgumentError(absl::StrCat(field_where, ": want 64 hex digits"));
    }
    RETURN_IF_ERROR(AddDigest(name, digest, where));
  }
  return absl::OkStatus();
}

absl::Status ApiKeys::AddKeyList(absl::string_view list, absl::string_view source) {
  int index = 0;
  for (absl::string_view entry : absl::StrSplit(list, ',')) {
    entry = absl::StripAsciiWhitespace(entry);
    if (entry.empty()) {
      continue;
    }
    const std::string where = absl::StrCat(source, ": entry ", index++);
    const size_t eq = entry.find('=');
    if (eq == absl::string_view::npos) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": want tenant=key"));
    }
    const absl::string_view name = entry.substr(0, eq);
    const absl::string_view key = entry.substr(eq + 1);
    RETURN_IF_ERROR(CheckTenantName(name, absl::StrCat(where, ": tenant")));
    RETURN_IF_ERROR(CheckKey(key, absl::StrCat(where, " (tenant ", name, "): key")));
    RETURN_IF_ERROR(AddDigest(name, Sha256(key), where));
  }
  return absl::OkStatus();
}

absl::Status ApiKeys::Add(absl::string_view tenant, absl::string_view key) {
  RETURN_IF_ERROR(CheckTenantName(tenant, "tenant"));
  RETURN_IF_ERROR(CheckKey(key, absl::StrCat("tenant ", tenant, ": key")));
  return AddDigest(tenant, Sha256(key), absl::StrCat("tenant ", tenant));
}

absl::Status ApiKeys::AddDigest(absl::string_view tenant, const Digest& digest,
                                absl::string_view where) {
  for (const Entry& e : entries_) {
    if (CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0) {
      return absl::InvalidArgumentError(absl::StrCat(where, ": this key is given twice (tenants ",
                                                     e.tenant, " and ", tenant, ")"));
    }
  }
  entries_.push_back({std::string(tenant), digest});
  return absl::OkStatus();
}

std::vector<std::string> ApiKeys::tenants() const {
  std::vector<std::string> out;
  for (const Entry& e : entries_) {
    if (std::find(out.begin(), out.end(), e.tenant) == out.end()) {
      out.push_back(e.tenant);
    }
  }
  return out;
}

absl::StatusOr<Tenant> ApiKeys::Authenticate(absl::string_view authorization_value) const {
  if (!enabled()) {
    return Tenant{};
  }
  absl::string_view value = absl::StripAsciiWhitespace(authorization_value);
  if (value.empty()) {
    return Unauthenticated(
        "no API key: send the header 'Authorization: Bearer <key>' (gRPC: metadata "
        "'authorization')");
  }
  constexpr absl::string_view kBearer = "bearer ";
  if (value.size() <= kBearer.size() ||
      !absl::EqualsIgnoreCase(value.substr(0, kBearer.size()), kBearer)) {
    return Unauthenticated("the authorization value must be 'Bearer <key>'");
  }
  const absl::string_view key = absl::StripLeadingAsciiWhitespace(value.substr(kBearer.size()));
  const Digest digest = Sha256(key);
  // Every entry is compared, in constant time each: how long this takes
  // depends on the number of keys only.
  const Entry* found = nullptr;
  for (const Entry& e : entries_) {
    if (CRYPTO_memcmp(e.digest.data(), digest.data(), digest.size()) == 0) {
      found = &e;
    }
  }
  if (found == nullptr) {
    return Unauthenticated("invalid API key");
  }
  return Tenant{found->tenant};
}

bool ApiKeys::RequiresKey(absl::string_view path) const {
  if (!enabled()) {
    return false;
  }
  if (public_health_ && (path == "/health" || path == "/health/ready" || path == "/health/live")) {
    return false;
  }
  if (public_metrics_ && path == "/metrics") {
    return false;
  }
  return true;
}

HttpAuthDecision AuthorizeHttp(const ApiKeys& keys, absl::string_view path,
                               absl::string_view authorization_value) {
  HttpAuthDecision d;
  if (!keys.RequiresKey(path)) {
    return d;
  }
  absl::StatusOr<Tenant> tenant = keys.Authenticate(authorization_value);
  if (tenant.ok()) {
    d.tenant = std::move(tenant->name);
    return d;
  }
  d.allowed = false;
  d.http_status = HttpStatusFor(tenant.status().code());
  d.body = OpenAiErrorJson(tenant.status());
  return d;
}

bool IsLoopbackAddress(absl::string_view address) {
  if (absl::StartsWith(address, "unix:")) {
    return true;  // a local socket: reachable only through the file system
  }
  absl::string_view host = address;
  if (absl::ConsumePrefix(&host, "[")) {
    const size_t close = host.find(']');
    host = host.substr(0, close);
  } else if (const size_t colon = host.rfind(':'); colon != absl::string_view::npos) {
    host = host.substr(0, colon);
  }
  return host == "localhost" || host == "::1" || absl::StartsWith(host, "127.");
}

}  // namespace tandem::router
