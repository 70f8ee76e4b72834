#pragma once
// Credentials of the cluster's internal gRPC (issue 8): mutual TLS against
// one cluster CA. Every worker server requires and verifies a client
// certificate issued by that CA; every internal channel (router -> worker,
// prefill -> decode Commit, `tandem up` health checks) presents its own
// certificate and verifies the server's against the same CA. With no files
// configured the old insecure credentials are returned (unit tests, loopback
// only: see CheckInternalListen).
//
// The PEM files are read and parsed with OpenSSL before they reach gRPC, so a
// missing, unreadable or non-PEM file is an error naming it rather than a
// handshake that fails later. Thread-compatible; called at startup.

#include <grpcpp/security/credentials.h>
#include <grpcpp/security/server_credentials.h>

#include <memory>
#include <string>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"

namespace tandem::proto {

struct TlsFiles {
  std::string ca_file;    // PEM: the cluster CA, trusted for peers
  std::string cert_file;  // PEM: this member's certificate (chain), serverAuth + clientAuth
  std::string key_file;   // PEM: its private key

  // Whether any file is set (Validate() then requires all three).
  bool enabled() const { return !ca_file.empty() || !cert_file.empty() || !key_file.empty(); }
  // InvalidArgument naming the missing key when some but not all are set;
  // the arguments are the config keys of the three files.
  absl::Status Validate(absl::string_view ca_key, absl::string_view cert_key,
                        absl::string_view key_key) const;
};

// The three files, loaded and checked: each is readable PEM (the CA and the
// certificate hold at least one X.509 certificate, the key a private key that
// matches the certificate). Errors name the file.
struct TlsMaterial {
  std::string ca_pem;
  std::string cert_pem;
  std::string key_pem;
};
absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files);

// Server side: TLS requiring and verifying a client certificate from the CA
// (GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY); insecure when
// `files` is not enabled().
absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files);

// Channel side: the CA as the only roots, this member's certificate and key
// as the client identity; insecure when `files` is not enabled().
absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files);

// Whether `address` ("host:port", "[v6]:port") names a loopback host:
// 127.0.0.0/8, ::1 or localhost.
bool IsLoopbackAddress(absl::string_view address);

// OK when `address` is plain host:port (a name, an IPv4 address or a
// bracketed IPv6 address, and a port in 1..65535); InvalidArgument naming it
// otherwise (URI schemes such as unix: or dns:///, empty parts, slashes...).
absl::Status CheckHostPort(absl::string_view address);

// The rule for an internal listener or peer set: FailedPrecondition when
// `address` is not loopback, TLS is off and `allow_insecure` is not set
// (`what` names the setting in the message: "listen", "workers.static").
absl::Status CheckInternalAddress(absl::string_view what, absl::string_view address,
                                  bool tls_enabled, bool allow_insecure);

}  // namespace tandem::proto
