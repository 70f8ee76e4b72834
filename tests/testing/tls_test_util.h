#pragma once
// Internal mutual TLS in tests: certificates made by scripts/make_dev_ca.sh
// (the very script `tandem up` runs) into a directory, the worker flags that
// use them, and channel credentials presenting them.

#include <grpcpp/security/credentials.h>

#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "proto/tls_credentials.h"

namespace tandem::testing {

// Runs scripts/make_dev_ca.sh `dir` (default SANs: 127.0.0.1, ::1,
// localhost) and returns dir's ca.pem, cluster.pem and cluster.key. Each call
// with a fresh `dir` makes a new, unrelated CA.
absl::StatusOr<proto::TlsFiles> MakeDevCa(const std::string& dir);

// --tls_ca=... --tls_cert=... --tls_key=... for a worker binary.
std::vector<std::string> TlsFlags(const proto::TlsFiles& files);

// Channel credentials presenting `files`' certificate (a test failure, and
// insecure credentials, on a bad file: the files come from MakeDevCa).
std::shared_ptr<grpc::ChannelCredentials> ClientCredentials(const proto::TlsFiles& files);

// TLS that trusts `ca_file` but presents no client certificate.
std::shared_ptr<grpc::ChannelCredentials> NoClientCertCredentials(const std::string& ca_file);

}  // namespace tandem::testing
