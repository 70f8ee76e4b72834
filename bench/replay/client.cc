#include "bench/replay/client.h"

#include <arpa/inet.h>

#include "absl/strings/match.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tandem::replay {

absl::StatusOr<Protocol> ParseProtocol(absl::string_view name) {
  if (name == "grpc") {
    return Protocol::kGrpc;
  }
  if (name == "http") {
    return Protocol::kHttp;
  }
  return absl::InvalidArgumentError(
      absl::StrCat("--protocol '", name, "': unknown protocol (grpc, http)"));
}

const char* ProtocolName(Protocol protocol) {
  return protocol == Protocol::kGrpc ? "grpc" : "http";
}

absl::StatusOr<HostPort> ParseTarget(absl::string_view target) {
  const size_t colon = target.rfind(':');
  HostPort hp;
  if (colon == absl::string_view::npos || colon == 0 ||
      !absl::SimpleAtoi(target.substr(colon + 1), &hp.port) || hp.port <= 0 || hp.port > 65535) {
    return absl::InvalidArgumentError(
        absl::StrCat("--target '", target, "' is not HOST:PORT (e.g. 127.0.0.1:8080)"));
  }
  absl::string_view host = target.substr(0, colon);
  if (absl::ConsumePrefix(&host, "[") && !absl::ConsumeSuffix(&host, "]")) {
    return absl::InvalidArgumentError(absl::StrCat("--target '", target, "': unclosed '['"));
  }
  hp.host = std::string(host);
  return hp;
}

bool IsLoopbackHost(absl::string_view host) {
  if (host == "localhost" || host == "::1") {
    return true;
  }
  in_addr v4{};
  return inet_pton(AF_INET, std::string(host).c_str(), &v4) == 1 &&
         (ntohl(v4.s_addr) >> 24) == 127;
}

void Cancellation::Cancel() {
  absl::MutexLock lock(&mu_);
  cancelled_.store(true);
  if (hook_) {
    hook_();
  }
}

bool Cancellation::cancelled() const { return cancelled_.load(); }

void Cancellation::SetHook(absl::AnyInvocable<void()> hook) {
  absl::MutexLock lock(&mu_);
  hook_ = std::move(hook);
  if (cancelled_.load()) {
    hook_();
  }
}

void Cancellation::ClearHook() {
  absl::MutexLock lock(&mu_);
  hook_ = nullptr;
}

absl::StatusOr<std::unique_ptr<Client>> MakeClient(const ClientOptions& options) {
  if (absl::Status s = ParseTarget(options.target).status(); !s.ok()) {
    return s;
  }
  return options.protocol == Protocol::kGrpc ? internal::MakeGrpcClient(options)
                                             : internal::MakeHttpClient(options);
}

namespace internal {

RequestRecord NewRecord(const ReplayRequest& request, Protocol protocol) {
  RequestRecord r;
  r.id = request.id;
  r.kind = request.kind;
  r.source_line = request.source_line;
  r.protocol = ProtocolName(protocol);
  r.scheduled_s = request.send_at_s;
  r.prompt_tokens = request.prompt_tokens;
  r.max_tokens = request.max_tokens;
  return r;
}

double SecondsSince(absl::Time origin) { return absl::ToDoubleSeconds(absl::Now() - origin); }

}  // namespace internal
}  // namespace tandem::replay
