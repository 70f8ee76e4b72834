#pragma once

// tandem-replay's clients: one request at a time, streamed, timed. The gRPC
// client calls the router's public tandem.v1.Generation/Generate; the HTTP
// client POSTs /v1/completions with stream=true (SSE) and
// stream_options.include_usage. Both send max_tokens with ignore_eos (the
// router honours it on both fronts), the given temperature (0 by default), and
// "Authorization: Bearer KEY" when an API key is given.
#include <atomic>
#include <memory>
#include <string>

#include "absl/base/thread_annotations.h"
#include "absl/functional/any_invocable.h"
#include "absl/status/statusor.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "bench/replay/record.h"
#include "bench/replay/workload.h"

namespace tandem::replay {

enum class Protocol { kGrpc, kHttp };
absl::StatusOr<Protocol> ParseProtocol(absl::string_view name);  // "grpc" | "http"
const char* ProtocolName(Protocol protocol);

// Stops one request from another thread (the runner's hard stop). Any thread.
class Cancellation {
 public:
  // Marks the request cancelled and runs the client's hook, if one is set.
  void Cancel();
  bool cancelled() const;
  // The client's way to abort its call (runs at once when already
  // cancelled). Cleared before the call's state goes away.
  void SetHook(absl::AnyInvocable<void()> hook);
  void ClearHook();

 private:
  // Lock-free to read: clients poll it from inside their I/O library's
  // callbacks, which may hold that library's locks (which a hook may take).
  std::atomic<bool> cancelled_{false};
  absl::Mutex mu_;  // the hook runs under it, so it never outlives ClearHook()
  absl::AnyInvocable<void()> hook_ ABSL_GUARDED_BY(mu_);
};

struct ClientOptions {
  Protocol protocol = Protocol::kGrpc;
  std::string target;   // host:port
  std::string model;    // sent with each request ("" = the router's default)
  std::string api_key;  // "" = none
  // Sampling temperature sent with each request: 0 (greedy, the default) or
  // e.g. 1.0 to load the server as a client that leaves OpenAI's default does.
  double temperature = 0;
};

class Client {
 public:
  virtual ~Client() = default;
  // Sends `request`, streams the answer and returns its record (times from
  // `origin`). Never fails as a call: a failure is the record's status.
  // Blocks until the stream ends or `cancel` fires. Any thread, many at once.
  virtual RequestRecord Send(const ReplayRequest& request, absl::Time origin,
                             Cancellation& cancel) = 0;
};

struct HostPort {
  std::string host;  // without brackets ("::1")
  int port = 0;
};
// "127.0.0.1:8080", "localhost:8080", "[::1]:8080"; InvalidArgument otherwise.
absl::StatusOr<HostPort> ParseTarget(absl::string_view target);
// 127.0.0.0/8, ::1 and "localhost".
bool IsLoopbackHost(absl::string_view host);

// InvalidArgument when the target is not host:port.
absl::StatusOr<std::unique_ptr<Client>> MakeClient(const ClientOptions& options);

namespace internal {
absl::StatusOr<std::unique_ptr<Client>> MakeGrpcClient(const ClientOptions& options);
absl::StatusOr<std::unique_ptr<Client>> MakeHttpClient(const ClientOptions& options);
// The record's fields that come from the request itself.
RequestRecord NewRecord(const ReplayRequest& request, Protocol protocol);
double SecondsSince(absl::Time origin);
}  // namespace internal

}  // namespace tandem::replay
