#include "proto/tls_credentials.h"

#include <arpa/inet.h>
#include <openssl/err.h>
#include <openssl/evp.h>
#include <openssl/pem.h>
#include <openssl/x509.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>
#include <vector>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace tandem::proto {
namespace {

struct BioDeleter {
  void operator()(BIO* b) const { BIO_free(b); }
};
struct X509Deleter {
  void operator()(X509* x) const { X509_free(x); }
};
struct PkeyDeleter {
  void operator()(EVP_PKEY* k) const { EVP_PKEY_free(k); }
};
using BioPtr = std::unique_ptr<BIO, BioDeleter>;
using X509Ptr = std::unique_ptr<X509, X509Deleter>;
using PkeyPtr = std::unique_ptr<EVP_PKEY, PkeyDeleter>;

// OpenSSL's queued error, as text, and the queue cleared.
std::string OpenSslError() {
  const unsigned long e = ERR_get_error();
  ERR_clear_error();
  if (e == 0) {
    return "no PEM block found";
  }
  char buf[256];
  ERR_error_string_n(e, buf, sizeof(buf));
  return buf;
}

absl::StatusOr<std::string> ReadFile(absl::string_view what, const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    return absl::NotFoundError(
        absl::StrCat("TLS ", what, " file '", path, "': cannot read it: ", std::strerror(errno)));
  }
  std::stringstream ss;
  ss << in.rdbuf();
  if (in.bad()) {
    return absl::NotFoundError(absl::StrCat("TLS ", what, " file '", path, "': read error"));
  }
  return ss.str();
}

BioPtr MemBio(const std::string& pem) {
  return BioPtr(BIO_new_mem_buf(pem.data(), static_cast<int>(pem.size())));
}

// The X.509 certificates in `pem`, in order; InvalidArgument naming the file
// when there is none or one does not parse.
absl::StatusOr<std::vector<X509Ptr>> ParseCerts(absl::string_view what, const std::string& path,
                                                const std::string& pem) {
  std::vector<X509Ptr> certs;
  ERR_clear_error();
  BioPtr bio = MemBio(pem);
  while (X509* x = PEM_read_bio_X509(bio.get(), nullptr, nullptr, nullptr)) {
    certs.emplace_back(x);
  }
  // The loop ends on "no start line" after the last certificate; anything
  // else (a corrupt block) is an error.
  const unsigned long e = ERR_peek_last_error();
  if (certs.empty() || (e != 0 && ERR_GET_REASON(e) != PEM_R_NO_START_LINE)) {
    return absl::InvalidArgumentError(absl::StrCat("TLS ", what, " file '", path,
                                                   "' holds no valid PEM certificate (",
                                                   OpenSslError(), ")"));
  }
  ERR_clear_error();
  return certs;
}

absl::StatusOr<PkeyPtr> ParseKey(const std::string& path, const std::string& pem) {
  ERR_clear_error();
  BioPtr bio = MemBio(pem);
  PkeyPtr key(PEM_read_bio_PrivateKey(bio.get(), nullptr, nullptr, nullptr));
  if (key == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "TLS key file '", path, "' holds no valid PEM private key (", OpenSslError(), ")"));
  }
  return key;
}

// The host part of "host:port" / "[v6]:port" (brackets removed), or the
// whole text when there is no colon.
std::string HostOf(absl::string_view address) {
  absl::string_view host = address;
  if (absl::StartsWith(address, "[")) {
    const size_t close = address.find(']');
    if (close != absl::string_view::npos) {
      return std::string(address.substr(1, close - 1));
    }
  }
  const size_t colon = address.rfind(':');
  if (colon != absl::string_view::npos) {
    host = address.substr(0, colon);
  }
  return std::string(host);
}

}  // namespace

absl::Status TlsFiles::Validate(absl::string_view ca_key, absl::string_view cert_key,
                                absl::string_view key_key) const {
  if (!enabled()) {
    return absl::OkStatus();
  }
  for (const auto& [key, value] : {std::pair<absl::string_view, const std::string*>{ca_key, &ca_file},
                                   {cert_key, &cert_file},
                                   {key_key, &key_file}}) {
    if (value->empty()) {
      return absl::InvalidArgumentError(absl::StrCat(
          "config: ", key, " is empty; internal TLS needs ", ca_key, ", ", cert_key, " and ",
          key_key, " together"));
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<TlsMaterial> LoadTlsMaterial(const TlsFiles& files) {
  if (absl::Status s = files.Validate("ca_file", "cert_file", "key_file"); !s.ok()) {
    return s;
  }
  TlsMaterial m;
  absl::StatusOr<std::string> ca = ReadFile("CA", files.ca_file);
  if (!ca.ok()) return ca.status();
  absl::StatusOr<std::string> cert = ReadFile("certificate", files.cert_file);
  if (!cert.ok()) return cert.status();
  absl::StatusOr<std::string> key = ReadFile("key", files.key_file);
  if (!key.ok()) return key.status();

  if (absl::Status s = ParseCerts("CA", files.ca_file, *ca).status(); !s.ok()) {
    return s;
  }
  absl::StatusOr<std::vector<X509Ptr>> chain = ParseCerts("certificate", files.cert_file, *cert);
  if (!chain.ok()) return chain.status();
  absl::StatusOr<PkeyPtr> pkey = ParseKey(files.key_file, *key);
  if (!pkey.ok()) return pkey.status();
  if (X509_check_private_key(chain->front().get(), pkey->get()) != 1) {
    ERR_clear_error();
    return absl::InvalidArgumentError(absl::StrCat("TLS key file '", files.key_file,
                                                   "' does not match the certificate in '",
                                                   files.cert_file, "'"));
  }
  m.ca_pem = *std::move(ca);
  m.cert_pem = *std::move(cert);
  m.key_pem = *std::move(key);
  return m;
}

absl::StatusOr<std::shared_ptr<grpc::ServerCredentials>> MakeServerCredentials(
    const TlsFiles& files) {
  if (!files.enabled()) {
    return grpc::InsecureServerCredentials();
  }
  absl::StatusOr<TlsMaterial> m = LoadTlsMaterial(files);
  if (!m.ok()) return m.status();
  grpc::SslServerCredentialsOptions options(
      GRPC_SSL_REQUEST_AND_REQUIRE_CLIENT_CERTIFICATE_AND_VERIFY);
  options.pem_root_certs = m->ca_pem;
  options.pem_key_cert_pairs.push_back({m->key_pem, m->cert_pem});
  return grpc::SslServerCredentials(options);
}

absl::StatusOr<std::shared_ptr<grpc::ChannelCredentials>> MakeChannelCredentials(
    const TlsFiles& files) {
  if (!files.enabled()) {
    return grpc::InsecureChannelCredentials();
  }
  absl::StatusOr<TlsMaterial> m = LoadTlsMaterial(files);
  if (!m.ok()) return m.status();
  grpc::SslCredentialsOptions options;
  options.pem_root_certs = m->ca_pem;
  options.pem_private_key = m->key_pem;
  options.pem_cert_chain = m->cert_pem;
  return grpc::SslCredentials(options);
}

bool IsLoopbackAddress(absl::string_view address) {
  const std::string host = absl::AsciiStrToLower(HostOf(address));
  if (host == "localhost") {
    return true;
  }
  in_addr v4{};
  if (inet_pton(AF_INET, host.c_str(), &v4) == 1) {
    return (ntohl(v4.s_addr) >> 24) == 127;
  }
  in6_addr v6{};
  if (inet_pton(AF_INET6, host.c_str(), &v6) == 1) {
    return IN6_IS_ADDR_LOOPBACK(&v6);
  }
  return false;
}

absl::Status CheckHostPort(absl::string_view address) {
  auto bad = [&](absl::string_view why) {
    return absl::InvalidArgumentError(
        absl::StrCat("address '", address, "' is not host:port (", why, ")"));
  };
  const size_t colon = address.rfind(':');
  if (colon == absl::string_view::npos) {
    return bad("no port");
  }
  int port = 0;
  if (!absl::SimpleAtoi(address.substr(colon + 1), &port) || port < 1 || port > 65535) {
    return bad("port must be 1..65535");
  }
  absl::string_view host = address.substr(0, colon);
  if (absl::StartsWith(host, "[") && absl::EndsWith(host, "]")) {
    const std::string v6(host.substr(1, host.size() - 2));
    in6_addr a{};
    if (inet_pton(AF_INET6, v6.c_str(), &a) != 1) {
      return bad("bad IPv6 address");
    }
    return absl::OkStatus();
  }
  if (host.empty()) {
    return bad("empty host");
  }
  for (char c : host) {
    // DNS names and IPv4 addresses: letters, digits, '-', '.', '_'. This
    // excludes URI schemes ("unix:", "dns:///"), paths and whitespace.
    if (!absl::ascii_isalnum(static_cast<unsigned char>(c)) && c != '-' && c != '.' && c != '_') {
      return bad("host may hold only letters, digits, '-', '.' and '_'");
    }
  }
  return absl::OkStatus();
}

absl::Status CheckInternalAddress(absl::string_view what, absl::string_view address,
                                  bool tls_enabled, bool allow_insecure) {
  if (tls_enabled || allow_insecure || IsLoopbackAddress(address)) {
    return absl::OkStatus();
  }
  return absl::FailedPreconditionError(absl::StrCat(
      what, " '", address,
      "' is not loopback and internal TLS is off: anyone who can reach it could call the "
      "internal services; configure the cluster CA and certificate, or set "
      "allow_insecure_internal: true"));
}

}  // namespace tandem::proto
