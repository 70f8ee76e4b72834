#include "prefill_worker/prefill_service.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <utility>

#include "absl/container/flat_hash_set.h"
#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "common/serving/request_validation.h"
#include "proto/grpc_status.h"
#include "proto/tls_credentials.h"

namespace tandem::prefill_worker {
namespace {

// The reservation is peer input (a client may forge it): every count, size
// and id is checked against the layout before anything reaches the
// transport, so a write can only target the blocks it names, inside the pool
// it describes. Fills job.remote, job.remote_blocks and job.region.
absl::Status CheckReservationShape(const tandem::v1::KvReservation& r,
                                   const kvtransfer::KvLayout& remote, size_t prompt_tokens,
                                   PrefillJob& job) {
  if (r.transfer_mode() != "put" && r.transfer_mode() != "am") {
    return absl::InvalidArgumentError(absl::StrCat("prefill: reservation.transfer_mode '",
                                                   r.transfer_mode(), "' is not put or am"));
  }
  if (r.worker_address().empty()) {
    return absl::InvalidArgumentError("prefill: reservation.worker_address is empty");
  }
  if (r.rkey().empty()) {
    return absl::InvalidArgumentError("prefill: reservation.rkey is empty");
  }
  const int64_t want_blocks =
      (static_cast<int64_t>(prompt_tokens) + remote.block_size - 1) / remote.block_size;
  if (r.block_ids_size() != want_blocks) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: reservation.block_ids has ",
                                                   r.block_ids_size(), " blocks, the prompt of ",
                                                   prompt_tokens, " tokens needs ", want_blocks));
  }
  const uint64_t per_block = static_cast<uint64_t>(remote.num_layers) * 2 * remote.block_bytes();
  if (r.pool_bytes() == 0 || r.pool_bytes() % per_block != 0 ||
      r.pool_bytes() / per_block > static_cast<uint64_t>(std::numeric_limits<int32_t>::max())) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: reservation.pool_bytes ",
                                                   r.pool_bytes(), " is not a whole number of ",
                                                   per_block, "-byte blocks"));
  }
  if (r.pool_base() == 0 || r.pool_base() > std::numeric_limits<uint64_t>::max() - r.pool_bytes()) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: reservation.pool_base ", r.pool_base(),
                                                   " with ", r.pool_bytes(),
                                                   " bytes is null or past the address space"));
  }
  if (r.expected_bytes() != per_block * static_cast<uint64_t>(want_blocks)) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: reservation.expected_bytes ",
                                                   r.expected_bytes(), " is not ", want_blocks,
                                                   " blocks of ", per_block, " bytes"));
  }
  job.remote.layout = remote;
  job.remote.num_blocks = static_cast<int32_t>(r.pool_bytes() / per_block);
  job.remote_blocks.assign(r.block_ids().begin(), r.block_ids().end());
  absl::flat_hash_set<int32_t> seen;
  for (int32_t id : job.remote_blocks) {
    if (id < 0 || id >= job.remote.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("prefill: reservation.block_ids has ", id,
                                                     ", outside the pool [0, ",
                                                     job.remote.num_blocks, ")"));
    }
    if (!seen.insert(id).second) {
      return absl::InvalidArgumentError(
          absl::StrCat("prefill: reservation.block_ids has ", id, " twice"));
    }
  }
  job.region.worker_address = r.worker_address();
  job.region.rkey = r.rkey();
  job.region.base = r.pool_base();
  job.region.bytes = r.pool_bytes();
  return absl::OkStatus();
}

class PrefillCallReactor final : public grpc::ServerUnaryReactor, public PrefillCall {
 public:
  PrefillCallReactor(PrefillEngine* engine, engine::SequenceId key,
                     tandem::v1::PrefillResponse* response)
      : engine_(engine), key_(key), response_(response) {}

  void Done(absl::StatusOr<PrefillResult> result) override {
    if (!result.ok()) {
      Finish(proto::ToGrpcStatus(result.status()));  // last touch of `this`
      return;
    }
    response_->set_first_token(result->first.token);
    response_->set_cached_prompt_tokens(result->cached_prompt_tokens);
    response_->set_kv_bytes(result->kv_bytes);
    response_->set_prefill_seconds(absl::ToDoubleSeconds(result->prefill));
    response_->set_kv_transfer_seconds(absl::ToDoubleSeconds(result->kv_transfer));
    Finish(grpc::Status::OK);  // last touch of `this`
  }

 private:
  void OnCancel() override { engine_->CancelKey(key_); }
  void OnDone() override { delete this; }

  PrefillEngine* const engine_;
  const engine::SequenceId key_;
  tandem::v1::PrefillResponse* const response_;
};

}  // namespace

PrefillService::PrefillService(PrefillEngine* engine) : engine_(engine) {}

absl::StatusOr<PrefillJob> PrefillService::ToJob(const tandem::v1::PrefillRequest& request,
                                                 const engine::ModelConfig& model,
                                                 const kvtransfer::KvLayout& local_layout) {
  const tandem::v1::DecodeSubmit& submit = request.request();
  PrefillJob job;
  job.request_id = submit.request_id();
  job.prompt.assign(submit.prompt_ids().begin(), submit.prompt_ids().end());
  job.sampling = serving::SamplingFromProto(submit.sampling());
  RETURN_IF_ERROR(
      serving::ValidateGenerationRequest(model, job.prompt, submit.max_tokens(), job.sampling));
  if (!request.has_reservation()) {
    return absl::InvalidArgumentError("prefill: the request carries no KV reservation");
  }
  const tandem::v1::KvReservation& r = request.reservation();
  if (job.request_id.empty()) {
    job.request_id = r.request_id();
  }
  if (job.request_id.empty() || job.request_id != r.request_id()) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: request id '", job.request_id,
                                                   "' does not match the reservation's '",
                                                   r.request_id(), "'"));
  }
  kvtransfer::KvLayout remote;
  remote.num_layers = r.layout().num_layers();
  remote.num_kv_heads = r.layout().num_kv_heads();
  remote.head_dim = r.layout().head_dim();
  remote.block_size = r.layout().block_size();
  remote.model_id = r.layout().model_id();
  absl::StatusOr<engine::GgmlType> dtype = engine::GgmlTypeFromName(r.layout().dtype());
  if (!dtype.ok()) {
    return absl::FailedPreconditionError(
        absl::StrCat("KV layout mismatch: local {", local_layout.ToString(),
                     "} vs remote with dtype '", r.layout().dtype(), "'"));
  }
  remote.dtype = *dtype;
  RETURN_IF_ERROR(kvtransfer::CheckLayoutsMatch(local_layout, remote));
  RETURN_IF_ERROR(CheckReservationShape(r, remote, job.prompt.size(), job));
  job.transfer_tag = r.transfer_tag();
  job.decode_worker = r.decode_worker();
  if (job.decode_worker.empty()) {
    return absl::InvalidArgumentError("prefill: reservation.decode_worker is empty");
  }
  // Dialed for Decode.Commit (CommitClient): plain host:port only, before any
  // KV is pushed.
  RETURN_IF_ERROR(base::Annotate(proto::CheckHostPort(job.decode_worker),
                                 "prefill: reservation.decode_worker"));
  if (r.deadline_unix_seconds() > 0) {
    job.deadline = absl::UnixEpoch() + absl::Seconds(r.deadline_unix_seconds());
  }
  return job;
}

grpc::ServerUnaryReactor* PrefillService::Prefill(grpc::CallbackServerContext* context,
                                                  const tandem::v1::PrefillRequest* request,
                                                  tandem::v1::PrefillResponse* response) {
  // A refused request never writes: its decode worker may free the
  // reservation at once (see PrefillEngine::AbortReservation).
  auto abort_reservation = [&] {
    engine_->AbortReservation(request->reservation().decode_worker(),
                              request->reservation().request_id());
  };
  if (draining_.load(std::memory_order_relaxed)) {
    abort_reservation();
    grpc::ServerUnaryReactor* r = context->DefaultReactor();
    r->Finish(grpc::Status(grpc::StatusCode::UNAVAILABLE, "prefill worker is draining"));
    return r;
  }
  absl::StatusOr<PrefillJob> job = ToJob(*request, engine_->model_config(), engine_->layout());
  if (!job.ok()) {
    abort_reservation();
    grpc::ServerUnaryReactor* r = context->DefaultReactor();
    r->Finish(proto::ToGrpcStatus(job.status()));
    return r;
  }
  const auto deadline = context->deadline();
  if (deadline != std::chrono::system_clock::time_point::max()) {
    job->deadline = std::min(job->deadline, absl::FromChrono(deadline));
  }
  const engine::SequenceId key = engine_->NewRequestKey();
  auto* reactor = new PrefillCallReactor(engine_, key, response);
  engine_->Submit(key, *std::move(job), reactor);
  return reactor;
}

}  // namespace tandem::prefill_worker
