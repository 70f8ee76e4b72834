#include "decode_worker/decode_worker.h"

#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"
#include "common/base/status_macros.h"
#include "decode_worker/internal/proto_convert.h"

namespace tandem::decode_worker {
namespace {

tandem::v1::WorkerLoad LoadToProto(const LoadInfo& l, int32_t max_running) {
  tandem::v1::WorkerLoad p;
  p.set_running_requests(l.running);
  p.set_waiting_requests(l.waiting + l.reserved);
  p.set_queued_prefill_tokens(l.queued_prefill_tokens);
  p.set_free_kv_blocks(l.free_blocks);
  p.set_total_kv_blocks(l.total_blocks);
  p.set_cached_kv_blocks(l.cached_blocks);
  p.set_max_running_requests(max_running);
  return p;
}

}  // namespace

absl::StatusOr<std::unique_ptr<DecodeWorker>> DecodeWorker::Create(const serving::WorkerConfig& config) {
  RETURN_IF_ERROR(config.Validate());
  if (config.role != serving::WorkerRole::kDecode && config.role != serving::WorkerRole::kColocated) {
    return absl::InvalidArgumentError(
        absl::StrCat("tandem-decode: role must be decode or "
                     "colocated, got ",
                     serving::WorkerRoleName(config.role)));
  }
  std::unique_ptr<DecodeWorker> w(new DecodeWorker());
  w->config_ = config;
  ASSIGN_OR_RETURN(w->model_, engine::Model::Load(config.model));
  ASSIGN_OR_RETURN(std::unique_ptr<engine::Engine> engine,
                   engine::Engine::Create(*w->model_, config.ToEngineConfig()));

  kvtransfer::RegionDescriptor region;
  std::string transport_name = "none";
  if (config.role == serving::WorkerRole::kDecode) {
    kvtransfer::TransportConfig tc;
    tc.kind = config.transport;
    tc.mode = config.transport_mode;
    tc.ucx_tls = config.ucx_tls;
    tc.ucx_net_devices = config.ucx_net_devices;
    ASSIGN_OR_RETURN(w->transport_, kvtransfer::MakeTransport(tc));
    ASSIGN_OR_RETURN(region,
                     w->transport_->RegisterRegion(engine->kv_pool_base(),
                                                   static_cast<uint64_t>(engine->kv_pool_bytes())));
    transport_name = w->transport_->capabilities().name;
  }
  w->decode_metrics_ = std::make_unique<DecodeMetrics>(w->registry_, transport_name);

  DecodeEngineOptions opts;
  opts.scheduler.token_budget = config.token_budget;
  opts.scheduler.max_running = config.max_running;
  opts.scheduler.chunk_size = config.chunk_size;
  opts.scheduler.block_size = config.block_size;
  opts.reservation_deadline = config.reservation_deadline;
  opts.max_waiting = config.max_queued;
  w->engine_ = std::make_unique<DecodeEngine>(std::move(engine), w->transport_.get(), region, opts,
                                              w->decode_metrics_.get(), base::RealClock::Get());
  w->service_ = std::make_unique<DecodeService>(w->engine_.get());

  const engine::ModelConfig& mc = w->model_->config();
  tandem::v1::WorkerSnapshot snapshot = serving::MakeWorkerSnapshot(config.role, mc);
  internal::ToProto(w->engine_->layout(), snapshot.mutable_layout());
  *snapshot.mutable_load() = LoadToProto(w->engine_->load(), config.max_running);
  ASSIGN_OR_RETURN(w->server_, serving::WorkerServer::Start(config, w->service_.get(), std::move(snapshot),
                                                   w->registry_));
  const serving::WorkerServer& server = *w->server_;
  w->service_->set_advertise_address(server.address());
  w->engine_->set_worker_id(server.worker_id());

  serving::WorkerControlService* control = &w->server_->control();
  w->server_->health().AddLoop(&w->engine_->heartbeat());
  if (config.role == serving::WorkerRole::kColocated) {
    // Its prefix cache serves whole prompts: the router places by it. (A
    // decode worker's imported blocks are no prefill a router could skip.)
    w->engine_->set_block_listener(
        [control](const engine::KvBlockEvents& blocks) { control->PublishBlocks(blocks); });
  }
  w->engine_->Start([control, max_running = config.max_running](const LoadInfo& l) {
    control->PublishLoad(LoadToProto(l, max_running));
  });
  LOG(INFO) << "tandem-decode " << server.worker_id() << " role=" << serving::WorkerRoleName(config.role)
            << " serving on " << server.address() << " (port " << server.grpc_port()
            << "), metrics port " << server.metrics_port() << ", model " << mc.name << ", "
            << w->engine_->engine().num_blocks() << " KV blocks, transport " << transport_name;
  return w;
}

DecodeWorker::~DecodeWorker() { Shutdown(); }

bool DecodeWorker::Drain(absl::Duration grace) {
  const bool clean = server_->Drain(
      grace, [this] { return engine_->num_live_requests(); },
      [this] { service_->set_draining(true); });
  Shutdown();
  return clean;
}

void DecodeWorker::Shutdown() {
  if (shut_down_) {
    return;
  }
  shut_down_ = true;
  if (service_ != nullptr) service_->set_draining(true);
  // Fail what is left first so every stream is closed before the server waits for them.
  if (engine_ != nullptr) engine_->Stop();
  if (server_ != nullptr) server_->Shutdown();
  // The transport's region is the engine's KV pool: unregister before it goes.
  if (transport_ != nullptr) transport_->Shutdown();
}

}  // namespace tandem::decode_worker
