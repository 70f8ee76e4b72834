#pragma once
// API keys on the router's public fronts (OpenAI HTTP and gRPC
// tandem.v1.Generation): each tenant has one or more keys; a client sends
// "Authorization: Bearer <key>" (HTTP header, or gRPC metadata
// `authorization`) and the router knows the tenant from it.
//
// Keys come from a key file (auth.keys_file) and/or an environment variable
// (auth.keys_env, read by main()):
//
//   # keys.yaml
//   tenants:
//     - name: acme                 # [A-Za-z0-9._-], 1..64 characters
//       key: "sk-acme-..."         # 16..256 printable ASCII, no spaces
//     - name: globex
//       key_sha256: "9f86d0..."    # or the key's SHA-256 (64 hex digits):
//                                  # the file then holds no usable secret
//
//   TANDEM_API_KEYS="acme=sk-acme-...,globex=sk-globex-..."
//
// A tenant may appear several times (key rotation: old and new key both
// valid); one key may not belong to two tenants.
//
// Keys are held only as SHA-256 digests and compared with CRYPTO_memcmp
// against every configured digest (no early exit), so neither the key nor
// how much of it matched leaks through timing. No message or log line of
// this file, nor of its callers, contains a key: errors name the tenant,
// the file, the line and the field.
//
// With no key configured, enabled() is false and every request is allowed
// (the router then warns at start when a public front listens beyond
// loopback).
//
// Immutable after loading; any thread.

#include <array>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "router/config.h"

namespace tandem::router {

struct Tenant {
  std::string name;
};

class ApiKeys {
 public:
  // No keys: enabled() is false, every path is public.
  ApiKeys() = default;

  // Reads config.keys_file (when set) and parses `env_value` (the content of
  // the variable config.keys_env, "" = none). Errors (InvalidArgument, or
  // NotFound for an unreadable file) name the file or variable, the line or
  // entry and the field; never the key. The public-path switches come from
  // `config`.
  static absl::StatusOr<ApiKeys> Load(const AuthConfig& config, absl::string_view env_value);

  // The key-file YAML above; `source` names it in errors (the file path).
  absl::Status AddKeyFile(absl::string_view yaml, absl::string_view source);
  // "tenant=key,tenant=key" (spaces around entries ignored; empty entries
  // skipped); `source` names it in errors (the variable's name).
  absl::Status AddKeyList(absl::string_view list, absl::string_view source);
  // One key; InvalidArgument for a bad tenant name, a bad key or a key that
  // already belongs to another tenant.
  absl::Status Add(absl::string_view tenant, absl::string_view key);

  bool enabled() const { return !entries_.empty(); }
  // The distinct tenant names, in the order first added.
  std::vector<std::string> tenants() const;

  // `authorization_value` is the whole header / metadata value. The tenant
  // whose key it carries, or UNAUTHENTICATED saying what is wrong (no key,
  // not "Bearer <key>", a key no tenant has), never echoing what was sent.
  // With keys off, a tenant with an empty name.
  absl::StatusOr<Tenant> Authenticate(absl::string_view authorization_value) const;

  // Whether a request for the HTTP `path` (no query string) must carry a
  // key: every path when enabled(), except /health, /health/ready and
  // /health/live when auth.public_health and /metrics when
  // auth.public_metrics.
  bool RequiresKey(absl::string_view path) const;

 private:
  using Digest = std::array<uint8_t, 32>;
  struct Entry {
    std::string tenant;
    Digest digest;
  };
  // Adds a digest; `where` prefixes errors ("keys.yaml: tenants[2] (line 7)").
  absl::Status AddDigest(absl::string_view tenant, const Digest& digest, absl::string_view where);

  std::vector<Entry> entries_;
  bool public_health_ = true;
  bool public_metrics_ = true;
};

// The HTTP front's check, run before routing (so unknown routes are covered
// too). `allowed` with the tenant ("" when keys are off or the path is
// public), or 401 with the OpenAI error body
// {"error": {"message", "type": "invalid_request_error", "param": null,
// "code": "invalid_api_key"}}; the caller adds `WWW-Authenticate: Bearer`.
struct HttpAuthDecision {
  bool allowed = true;
  std::string tenant;
  int http_status = 200;
  std::string body;
};
HttpAuthDecision AuthorizeHttp(const ApiKeys& keys, absl::string_view path,
                               absl::string_view authorization_value);

// Whether a listen address ("host:port", "[v6]:port") is on loopback only
// (127.0.0.0/8, ::1, localhost; or a unix: socket). 0.0.0.0, [::], an empty
// host and any other host are not.
bool IsLoopbackAddress(absl::string_view address);

}  // namespace tandem::router
