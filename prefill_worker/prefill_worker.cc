#include "prefill_worker/prefill_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "common/engine/format/ggml_type.h"
#include "proto/tls_credentials.h"

namespace tandem::prefill_worker {
namespace {

tandem::v1::WorkerLoad LoadToProto(const PrefillLoad& l, int32_t max_running) {
  tandem::v1::WorkerLoad p;
  p.set_running_requests(l.running);
  p.set_waiting_requests(l.waiting);
  p.set_queued_prefill_tokens(l.queued_prompt_tokens);
  p.set_free_kv_blocks(l.free_blocks);
  p.set_total_kv_blocks(l.total_blocks);
  p.set_cached_kv_blocks(l.cached_blocks);
  p.set_max_running_requests(max_running);
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<PrefillWorker>> PrefillWorker::Create(const serving::WorkerConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  if (config.role != serving::WorkerRole::kPrefill) {
    return absl::InvalidArgumentError(
        absl::StrCat("tandem-prefill: role must be prefill, got ", serving::WorkerRoleName(config.role)));
  }
  std::unique_ptr<PrefillWorker> w(new PrefillWorker());
  w->config_ = config;
  ASSIGN_OR_RETURN(w->model_, engine::Model::Load(config.model));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine,
                   engine::Engine::Create(*w->model_, config.ToEngineConfig()));
  kvtransfer::TransportConfig tc;
  tc.kind = config.transport;
  tc.mode = config.transport_mode;
  tc.ucx_tls = config.ucx_tls;
  tc.ucx_net_devices = config.ucx_net_devices;
  ASSIGN_OR_RETURN(w->transport_, kvtransfer::MakeTransport(tc));
  RETURN_IF_ERROR(w->transport_->RegisterSource(engine->kv_pool_base(),
                                                static_cast<uint64_t>(engine->kv_pool_bytes())));
  const std::string transport_name = w->transport_->capabilities().name;
  w->prefill_metrics_ = std::make_unique<PrefillMetrics>(w->registry_, transport_name);
  ASSIGN_OR_RETURN(std::shared_ptr<grpc::ChannelCredentials> commit_credentials,
                   proto::MakeChannelCredentials(config.tls()));
  w->committer_ = std::make_unique<CommitClient>(std::move(commit_credentials));

  PrefillEngineOptions opts;
  opts.scheduler.token_budget = config.token_budget;
  opts.scheduler.chunk_size = config.chunk_size;
  opts.scheduler.max_running = config.max_running;
  opts.scheduler.block_size = config.block_size;
  opts.max_queued = config.max_queued;
  w->engine_ =
      std::make_unique<PrefillEngine>(std::move(engine), w->transport_.get(), w->committer_.get(),
                                      opts, w->prefill_metrics_.get(), base::RealClock::Get());
  w->service_ = std::make_unique<PrefillService>(w->engine_.get());

  const engine::ModelConfig& mc = w->model_->config();
  tandem::v1::WorkerSnapshot snapshot = serving::MakeWorkerSnapshot(serving::WorkerRole::kPrefill, mc);
  const kvtransfer::KvLayout& layout = w->engine_->layout();
  tandem::v1::KvLayout* pl = snapshot.mutable_layout();
  pl->set_num_layers(layout.num_layers);
  pl->set_num_kv_heads(layout.num_kv_heads);
  pl->set_head_dim(layout.head_dim);
  pl->set_block_size(layout.block_size);
  pl->set_dtype(std::string(engine::GgmlTypeName(layout.dtype)));
  pl->set_model_id(layout.model_id);
  *snapshot.mutable_load() = LoadToProto(w->engine_->load(), config.max_running);
  ASSIGN_OR_RETURN(w->server_, serving::WorkerServer::Start(config, w->service_.get(), std::move(snapshot),
                                                   w->registry_));
  const serving::WorkerServer& server = *w->server_;
  w->engine_->set_worker_id(server.worker_id());

  serving::WorkerControlService* control = &w->server_->control();
  w->server_->health().AddLoop(&w->engine_->heartbeat());
  w->engine_->set_block_listener(
      [control](const engine::KvBlockEvents& blocks) { control->PublishBlocks(blocks); });
  w->engine_->Start([control, max_running = config.max_running](const PrefillLoad& l) {
    control->PublishLoad(LoadToProto(l, max_running));
  });
  LOG(INFO) << "tandem-prefill " << server.worker_id() << " serving on " << server.address()
            << " (port " << server.grpc_port() << "), metrics port " << server.metrics_port()
            << ", model " << mc.name << ", " << w->engine_->engine().num_blocks()
            << " KV blocks, transport " << transport_name;
  return w;
}

PrefillWorker::~PrefillWorker() { Shutdown(); }

bool PrefillWorker::Drain(absl::Duration grace) {
  const bool clean = server_->Drain(
      grace, [this] { return engine_->num_live_requests(); },
      [this] { service_->set_draining(true); });
  Shutdown();
  return clean;
}

void PrefillWorker::Shutdown() {
  if (shut_down_) {
    return;
  }
  shut_down_ = true;
  if (service_ != nullptr) service_->set_draining(true);
  if (engine_ != nullptr) engine_->Stop();
  // Commit callbacks post to the engine's queue: none may run after this.
  if (committer_ != nullptr) committer_->Shutdown();
  if (server_ != nullptr) server_->Shutdown();
  // Pending writes read the engine's KV pool: stop them before it goes.
  if (transport_ != nullptr) transport_->Shutdown();
}

}  // namespace tandem::prefill_worker
