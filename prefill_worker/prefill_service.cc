#include "prefill_worker/prefill_service.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "common/base/status_macros.h"
#include "common/serving/request_validation.h"
#include "proto/grpc_status.h"

namespace tandem::prefill_worker {
namespace {

class PrefillCallReactor final : public grpc::ServerUnaryReactor, public PrefillCall {
 public:
  PrefillCallReactor(PrefillEngine* engine, engine::SequenceId key, tandem::v1::PrefillResponse* response)
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
  RETURN_IF_ERROR(serving::ValidateGenerationRequest(model, job.prompt, submit.max_tokens(), job.sampling));
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
  const int64_t want_blocks =
      (static_cast<int64_t>(job.prompt.size()) + remote.block_size - 1) / remote.block_size;
  if (r.block_ids_size() != want_blocks) {
    return absl::InvalidArgumentError(
        absl::StrCat("prefill: the reservation has ", r.block_ids_size(), " blocks, the prompt of ",
                     job.prompt.size(), " tokens needs ", want_blocks));
  }
  const uint64_t per_block = static_cast<uint64_t>(remote.num_layers) * 2 * remote.block_bytes();
  if (r.pool_bytes() == 0 || r.pool_bytes() % per_block != 0) {
    return absl::InvalidArgumentError(absl::StrCat("prefill: reservation pool of ", r.pool_bytes(),
                                                   " bytes is not a whole number of ", per_block,
                                                   "-byte blocks"));
  }
  job.remote.layout = remote;
  job.remote.num_blocks = static_cast<int32_t>(r.pool_bytes() / per_block);
  job.remote_blocks.assign(r.block_ids().begin(), r.block_ids().end());
  for (int32_t id : job.remote_blocks) {
    if (id < 0 || id >= job.remote.num_blocks) {
      return absl::InvalidArgumentError(absl::StrCat("prefill: reservation block id ", id,
                                                     " outside the pool [0, ",
                                                     job.remote.num_blocks, ")"));
    }
  }
  job.region.worker_address = r.worker_address();
  job.region.rkey = r.rkey();
  job.region.base = r.pool_base();
  job.region.bytes = r.pool_bytes();
  job.transfer_tag = r.transfer_tag();
  job.decode_worker = r.decode_worker();
  if (job.decode_worker.empty()) {
    return absl::InvalidArgumentError("prefill: the reservation names no decode worker");
  }
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
