#pragma once
// Exception-free helpers over yaml-cpp (which throws): typed reads that
// return InvalidArgument naming the key path. Used by the router and
// launcher config parsers.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "proto/tls_credentials.h"
#include "yaml-cpp/yaml.h"

namespace tandem::router::internal {

// Parses a document; syntax errors are InvalidArgument with line and column.
absl::StatusOr<YAML::Node> LoadYaml(absl::string_view text);

// InvalidArgument when `node` (a map, or null) has a key outside `allowed`.
absl::Status CheckKeys(const YAML::Node& node, const std::string& path,
                       const std::vector<std::string>& allowed);

// Each Read* leaves *out untouched when the key is absent or null.
absl::Status ReadString(const YAML::Node& map, const std::string& key, const std::string& path,
                        std::string* out);
absl::Status ReadInt(const YAML::Node& map, const std::string& key, const std::string& path,
                     int64_t* out);
absl::Status ReadInt32(const YAML::Node& map, const std::string& key, const std::string& path,
                       int32_t* out);
absl::Status ReadBool(const YAML::Node& map, const std::string& key, const std::string& path,
                      bool* out);
// "3s", "250ms", "1m" (absl::ParseDuration) or a bare number of seconds.
absl::Status ReadDuration(const YAML::Node& map, const std::string& key, const std::string& path,
                          absl::Duration* out);
absl::Status ReadStringList(const YAML::Node& map, const std::string& key,
                            const std::string& path, std::vector<std::string>* out);

std::string JoinPath(const std::string& path, const std::string& key);

// `node`, a map {ca, cert, key} of PEM paths (the router's and tandem up's
// internal_tls), into *out; relative paths are resolved against `base_dir`
// when it is not empty. InvalidArgument naming `path` for another key.
absl::Status ReadTlsFiles(const YAML::Node& node, const std::string& path,
                          absl::string_view base_dir, proto::TlsFiles* out);

}  // namespace tandem::router::internal
