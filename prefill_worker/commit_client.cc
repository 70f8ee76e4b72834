#include "prefill_worker/commit_client.h"

#include <grpcpp/grpcpp.h>

#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "proto/grpc_status.h"
#include "proto/tls_credentials.h"

namespace tandem::prefill_worker {

std::shared_ptr<tandem::v1::Decode::Stub> CommitClient::StubFor(const std::string& address) {
  absl::MutexLock lock(&mu_);
  if (auto it = stubs_.find(address); it != stubs_.end()) {
    return it->second;
  }
  if (stubs_.size() >= kMaxChannels) {
    stubs_.erase(stubs_.begin());  // calls in flight hold their own reference
  }
  // `address` was checked to be host:port; TLS verifies its certificate.
  std::shared_ptr<tandem::v1::Decode::Stub> stub =
      tandem::v1::Decode::NewStub(grpc::CreateChannel(address, credentials_));
  stubs_[address] = stub;
  return stub;
}

size_t CommitClient::cached_channels() const {
  absl::MutexLock lock(&mu_);
  return stubs_.size();
}

struct CommitClient::Call {
  std::shared_ptr<tandem::v1::Decode::Stub> stub;  // alive until the call is done
  grpc::ClientContext context;
  tandem::v1::CommitRequest request;
  tandem::v1::CommitResponse response;
  absl::AnyInvocable<void(absl::Status) &&> done;
};

CommitClient::~CommitClient() { Shutdown(); }

void CommitClient::Shutdown() {
  absl::MutexLock lock(&mu_);
  shut_down_ = true;
  for (Call* c : in_flight_) {
    c->context.TryCancel();
  }
  auto idle = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return in_flight_.empty(); };
  mu_.AwaitWithTimeout(absl::Condition(&idle), absl::Seconds(5));
}

void CommitClient::Commit(CommitArgs args, absl::AnyInvocable<void(absl::Status) &&> done) {
  // The decode worker's address comes from the (authenticated) Prefill
  // request; gRPC would also dial URIs (unix:, dns:///...): refuse those.
  if (absl::Status s = proto::CheckHostPort(args.decode_worker); !s.ok()) {
    std::move(done)(absl::InvalidArgumentError(
        absl::StrCat("reservation.decode_worker: ", s.message())));
    return;
  }
  auto* call = new Call();
  if (args.deadline != absl::InfiniteFuture()) {
    call->context.set_deadline(absl::ToChronoTime(args.deadline));
  }
  call->request.set_request_id(args.request_id);
  call->request.set_first_token(args.first.token);
  call->request.set_first_logprob(args.first.logprob);
  for (const engine::TokenLogprob& t : args.first.top_logprobs) {
    tandem::v1::TokenLogprob* p = call->request.add_first_top_logprobs();
    p->set_token(t.token);
    p->set_logprob(t.logprob);
  }
  call->request.set_num_tokens(args.num_tokens);
  call->request.set_bytes_written(args.bytes_written);
  call->request.set_abort(args.abort);
  {
    absl::MutexLock lock(&mu_);
    if (shut_down_) {
      delete call;
      std::move(done)(absl::UnavailableError("prefill worker shutting down"));
      return;
    }
    in_flight_.insert(call);
  }
  call->done = std::move(done);
  call->stub = StubFor(args.decode_worker);
  call->stub->async()
      ->Commit(&call->context, &call->request, &call->response, [this, call](grpc::Status s) {
        std::move(call->done)(proto::FromGrpcStatus(s));
        absl::MutexLock lock(&mu_);
        in_flight_.erase(call);
        delete call;
      });
}

}  // namespace tandem::prefill_worker
