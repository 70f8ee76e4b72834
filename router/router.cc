#include "router/router.h"

#include <thread>

#include "absl/strings/escaping.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/logging.h"
#include "router/api_error.h"
#include "router/internal/choice_call.h"
#include "router/internal/request_run.h"

namespace tandem::router {

using internal::ChoiceCall;
using internal::RequestRun;

namespace {

ModelCatalog WithRoutedAlias(ModelCatalog catalog, const RoutingConfig& routing) {
  if (routing.enabled()) {
    std::vector<std::string> models;
    for (const RoutingPoolConfig& p : routing.pools) {
      models.push_back(p.model);
    }
    catalog.SetRoutedAlias(routing.alias, std::move(models));
  }
  return catalog;
}

// What complexity routing scores: the prompt, or a chat's last user message.
absl::StatusOr<std::string> RoutingText(const GenerationRequest& request,
                                        const std::string& alias) {
  if (request.prompt_ids.has_value()) {
    return InvalidParam("prompt",
                        absl::StrCat("model '", alias,
                                     "' routes on the prompt's text: send text or messages, or "
                                     "name a served model for token ids"),
                        "invalid_prompt");
  }
  if (request.prompt_text.has_value()) {
    return *request.prompt_text;
  }
  if (!request.messages.has_value() || request.messages->empty()) {
    return std::string();  // PrepareRequest names the missing prompt
  }
  for (auto it = request.messages->rbegin(); it != request.messages->rend(); ++it) {
    if (it->role == "user") {
      return it->content;
    }
  }
  return request.messages->back().content;
}

}  // namespace

const char* FinishReasonName(FinishReason r) {
  switch (r) {
    case FinishReason::kLength:
      return "length";
    case FinishReason::kStop:
      return "stop";
    case FinishReason::kCancelled:
      return "cancelled";
  }
  return "length";
}

Router::Router(RouterConfig config, ModelCatalog catalog, SnapshotSource snapshots,
               base::MetricsRegistry& metrics, base::Clock& clock,
               std::shared_ptr<Embedder> embedder)
    : config_(std::move(config)),
      catalog_(WithRoutedAlias(std::move(catalog), config_.routing)),
      snapshots_(std::move(snapshots)),
      clock_(clock),
      embedder_(std::move(embedder)),
      metrics_(metrics),
      admission_(config_.admission) {
  if (config_.semantic_cache.enabled) {
    cache_ = std::make_unique<SemanticCache>(config_.semantic_cache,
                                             embedder_ != nullptr ? embedder_->dim() : 0, clock_);
    for (const auto& m : catalog_.models()) {
      metrics_.InitCache(m->name());
    }
  }
  if (config_.routing.enabled()) {
    absl::StatusOr<std::unique_ptr<ComplexityRouter>> r =
        ComplexityRouter::Create(config_.routing, catalog_, embedder_.get(), metrics);
    if (r.ok()) {
      routing_ = *std::move(r);
    } else {
      routing_status_ = r.status();
      LOG(ERROR) << "routing: " << r.status();
    }
  }
}

Router::~Router() { Shutdown(absl::ZeroDuration()); }

int64_t MaxPromptBytes(const LimitsConfig& limits, const ServedModel& model) {
  if (limits.max_prompt_bytes > 0) {
    return limits.max_prompt_bytes;
  }
  return std::max<int64_t>(int64_t{16} * model.context_length(), 64 << 10);
}

namespace {

absl::Status CheckPromptBytes(const GenerationRequest& request, const ModelCatalog& catalog,
                              const LimitsConfig& limits) {
  absl::StatusOr<const ServedModel*> model = catalog.Find(request.model);
  if (!model.ok()) {
    return absl::OkStatus();  // PrepareRequest names the unknown model
  }
  int64_t bytes = 0;
  const char* param = "prompt";
  if (request.prompt_text.has_value()) {
    bytes = static_cast<int64_t>(request.prompt_text->size());
  } else if (request.messages.has_value()) {
    param = "messages";
    for (const ChatMessage& m : *request.messages) {
      bytes += static_cast<int64_t>(m.role.size() + m.content.size());
      for (const ToolCall& call : m.tool_calls) {
        bytes += static_cast<int64_t>(call.name.size() + call.arguments.size());
      }
    }
    for (const std::string& tool : request.tools) {  // written into the prompt too
      bytes += static_cast<int64_t>(tool.size());
    }
  }
  const int64_t max = MaxPromptBytes(limits, **model);
  if (bytes <= max) {
    return absl::OkStatus();
  }
  return InvalidParam(
      param,
      absl::StrCat(request.messages.has_value() ? "the messages are " : "the prompt is ", bytes,
                   " bytes; this router accepts at most ", max,
                   " bytes of prompt text (limits.max_prompt_bytes",
                   limits.max_prompt_bytes > 0 ? "" : ", 16 x the context length", ")"),
      "context_length_exceeded");
}

// Prompt tokens each worker's prefix cache holds, by the snapshot's index
// (empty under placement least_load: nothing to look up).
std::map<std::string, int32_t> CachedPrefixes(const RouterConfig& config,
                                              const RegistrySnapshot& snapshot,
                                              const PreparedRequest& req) {
  if (config.placement != Placement::kKvAware || snapshot.prefixes == nullptr) {
    return {};
  }
  return snapshot.prefixes->CachedPrefixTokens(req.prompt_ids);
}

}  // namespace

absl::StatusOr<PreparedRequest> Router::Prepare(const GenerationRequest& request,
                                                absl::Time client_deadline) const {
  if (config_.routing.enabled() &&
      (request.model.empty() || request.model == config_.routing.alias)) {
    return PrepareRouted(request, client_deadline);
  }
  // Before tokenizing: a prompt far over the context costs tokenizer time and
  // memory (a 32 MB prompt is 33 M tokens) only to be refused.
  if (absl::Status s = CheckPromptBytes(request, catalog_, config_.limits); !s.ok()) {
    return s;
  }
  absl::StatusOr<PreparedRequest> p = PrepareRequest(request, catalog_, config_.limits);
  if (!p.ok()) {
    return p;
  }
  p->deadline = std::min(client_deadline, clock_.Now() + config_.limits.default_timeout);
  if (cache_ != nullptr) {
    absl::StatusOr<CacheRequest> cache = MakeCacheRequest(request, *p);
    if (!cache.ok()) {
      return cache.status();
    }
    p->cache = *std::move(cache);
  }
  return p;
}

absl::StatusOr<PreparedRequest> Router::PrepareRouted(const GenerationRequest& request,
                                                      absl::Time client_deadline) const {
  if (routing_ == nullptr) {
    return absl::FailedPreconditionError(
        absl::StrCat("model '", config_.routing.alias, "': routing is not running: ",
                     routing_status_.message()));
  }
  absl::StatusOr<std::string> text = RoutingText(request, config_.routing.alias);
  if (!text.ok()) {
    return text.status();
  }
  absl::StatusOr<RoutingDecision> d =
      routing_->Route(*text, config_.mode, *snapshots_(), clock_.Now());
  if (!d.ok()) {
    return d.status();
  }
  GenerationRequest routed = request;
  routed.model = d->model->name();
  absl::StatusOr<PreparedRequest> p = Prepare(routed, client_deadline);
  if (p.ok()) {
    p->route_pool = d->pool;
    p->complexity_score = d->score.score;
    VLOG(1) << "routing: request_id=" << p->request_id << " pool=" << d->pool
            << " model=" << routed.model << " score=" << d->score.score
            << " features=" << d->score.features_score
            << " exemplars=" << d->score.exemplar_score;
  }
  return p;
}

absl::StatusOr<RouteDecision> Router::Pick(const PreparedRequest& req,
                                           const RegistrySnapshot& snapshot,
                                           const std::set<std::string>& exclude) const {
  std::map<std::string, LocalLoad> local;
  {
    absl::MutexLock lock(&mu_);
    local = local_load_;
  }
  PickRequest pr;
  pr.model = req.model->worker_model_id();
  pr.mode = config_.mode;
  pr.prompt_tokens = static_cast<int32_t>(req.prompt_ids.size());
  pr.max_tokens = req.max_tokens;
  pr.exclude = exclude;
  pr.local = &local;
  const std::map<std::string, int32_t> cached = CachedPrefixes(config_, snapshot, req);
  pr.placement = config_.placement;
  pr.cached_prefix_tokens = &cached;
  return PickRoute(snapshot, pr, clock_.Now());
}

absl::StatusOr<std::shared_ptr<RequestHandle>> Router::Start(
    PreparedRequest request, std::shared_ptr<GenerationObserver> observer) {
  const std::string model = request.model->name();
  uint64_t id;
  std::map<std::string, LocalLoad> local;
  {
    absl::MutexLock lock(&mu_);
    if (shutting_down_) {
      absl::Status s = absl::UnavailableError("the router is shutting down");
      metrics_.CountRequest(model, s.code());
      return s;
    }
    id = next_id_++;
    local = local_load_;
  }
  CacheStatus cache_status = CacheStatus::kBypass;
  if (cache_ != nullptr && request.cache.eligible) {
    if (std::shared_ptr<RequestHandle> hit = ServeFromCache(id, request, observer, &cache_status)) {
      return hit;
    }
  }
  const int max = config_.limits.max_inflight;
  if (inflight_.fetch_add(1, std::memory_order_relaxed) >= max) {
    inflight_.fetch_sub(1, std::memory_order_relaxed);
    metrics_.rejected->Increment();
    metrics_.CountAdmissionRejection("max_inflight", AdmissionTenant(request));
    absl::Status s = absl::ResourceExhaustedError(
        absl::StrCat("the router is at capacity (", max, " requests in flight); retry after ",
                     absl::FormatDuration(config_.limits.retry_after)));
    RecordRejected(model, s);
    return s;
  }
  metrics_.inflight->Set(inflight_.load(std::memory_order_relaxed));

  std::shared_ptr<const RegistrySnapshot> snapshot = snapshots_();
  const absl::Time now = clock_.Now();
  // The routes first: admission estimates the wait on the workers picked.
  std::vector<RouteDecision> routes;
  PickRequest pr;
  pr.model = request.model->worker_model_id();
  pr.mode = config_.mode;
  pr.prompt_tokens = static_cast<int32_t>(request.prompt_ids.size());
  pr.max_tokens = request.max_tokens;
  pr.local = &local;
  const std::map<std::string, int32_t> cached = CachedPrefixes(config_, *snapshot, request);
  pr.placement = config_.placement;
  pr.cached_prefix_tokens = &cached;
  for (int32_t i = 0; i < request.n; ++i) {
    absl::StatusOr<RouteDecision> r = PickRoute(*snapshot, pr, now);
    if (!r.ok()) {
      inflight_.fetch_sub(1, std::memory_order_relaxed);
      metrics_.inflight->Set(inflight_.load(std::memory_order_relaxed));
      metrics_.CountRoute(model, "none");
      RecordRejected(model, r.status());
      return r.status();
    }
    // Spread the choices of one request like separate requests.
    const int64_t blocks = BlocksNeeded(pr.prompt_tokens, pr.max_tokens,
                                        r->decode->desc.kv_block_size);
    LocalLoad& d = local[r->decode->address];
    d.requests += 1;
    d.kv_blocks += blocks;
    if (r->colocated) {
      d.prompt_tokens += pr.prompt_tokens;  // it prefills too (KV-aware cost)
    }
    if (r->prefill != nullptr) {
      LocalLoad& p = local[r->prefill->address];
      p.requests += 1;
      p.prompt_tokens += pr.prompt_tokens;
    }
    routes.push_back(*r);
  }
  if (absl::Status s = Admit(id, request, *snapshot, routes, now); !s.ok()) {
    metrics_.rejected->Increment();
    inflight_.fetch_sub(1, std::memory_order_relaxed);
    metrics_.inflight->Set(inflight_.load(std::memory_order_relaxed));
    RecordRejected(model, s);
    return s;
  }

  auto run = std::make_shared<RequestRun>(*this, id, std::move(request), std::move(observer), now);
  run->set_cache_status(cache_status);
  {
    absl::MutexLock lock(&mu_);
    runs_[id] = run;
  }
  run->Launch(routes);
  return run;
}

void Router::RecordRejected(absl::string_view model, const absl::Status& status) {
  std::string label = "unknown";
  for (const auto& m : catalog_.models()) {
    if (m->name() == model) {
      label = m->name();
    }
  }
  if (model.empty() && catalog_.models().size() == 1) {
    label = catalog_.models()[0]->name();
  }
  if (config_.routing.enabled() && (model.empty() || model == config_.routing.alias)) {
    label = config_.routing.alias;
  }
  metrics_.CountRequest(label, status.code());
  LOG(INFO) << "request model=" << label << " code=" << absl::StatusCodeToString(status.code())
            << " error=\"" << absl::CHexEscape(status.message().substr(0, 200)) << "\"";
}

void Router::RunFinished(uint64_t run_id, const absl::Status& status,
                         const RequestSummary& s, absl::Duration tpot) {
  metrics_.CountRequest(s.model, status.code());
  const double e2e = absl::ToDoubleSeconds(s.total);
  metrics_.e2e(s.model)->Observe(e2e);
  if (s.completion_tokens > 0) {
    metrics_.ttft(s.model)->Observe(absl::ToDoubleSeconds(s.ttft));
  }
  if (tpot > absl::ZeroDuration()) {
    metrics_.tpot(s.model)->Observe(absl::ToDoubleSeconds(tpot));
  }
  std::string finish;
  for (const ChoiceResult& c : s.choices) {
    absl::StrAppend(&finish, finish.empty() ? "" : ",", FinishReasonName(c.reason));
  }
  LOG(INFO) << absl::StrFormat(
      "request request_id=%s client_request_id=\"%s\" tenant=\"%s\" model=%s code=%s finish=%s "
      "prompt_tokens=%d completion_tokens=%d "
      "cached_tokens=%d route=%s prefill_worker=%s decode_worker=%s attempt=%d queue_s=%.4f "
      "ttft_s=%.4f tpot_s=%.5f prefill_s=%.4f kv_transfer_s=%.4f e2e_s=%.4f%s",
      s.request_id, absl::CEscape(s.client_request_id), absl::CEscape(s.tenant), s.model,
      absl::StatusCodeToString(status.code()), finish.empty() ? "-" : finish, s.prompt_tokens,
      s.completion_tokens, s.cached_prompt_tokens,
      s.route.cache_hit ? "cache" : s.route.colocated ? "colocated" : "disaggregated",
      s.route.prefill_worker.empty() ? "-" : s.route.prefill_worker,
      s.route.decode_worker.empty() ? "-" : s.route.decode_worker, s.route.attempt,
      absl::ToDoubleSeconds(s.queue), absl::ToDoubleSeconds(s.ttft), absl::ToDoubleSeconds(tpot),
      absl::ToDoubleSeconds(s.prefill), absl::ToDoubleSeconds(s.kv_transfer), e2e,
      status.ok() ? "" : absl::StrCat(" error=\"", absl::CHexEscape(status.message()), "\""));
  // The decode model of admission's slot wait: tokens per choice.
  const int32_t choices = std::max<int32_t>(1, static_cast<int32_t>(s.choices.size()));
  admission_.Finished(run_id, clock_.Now(), s.completion_tokens / choices, tpot);
  ReportAdmissionQueue(s.model);
  absl::MutexLock lock(&mu_);
  runs_.erase(run_id);
}

std::string Router::AdmissionTenant(const PreparedRequest& request) const {
  return tenants_from_keys_.load(std::memory_order_relaxed) && !request.tenant.empty()
             ? request.tenant
             : std::string(kAnonymousTenant);
}

absl::Status Router::Admit(uint64_t id, const PreparedRequest& request,
                           const RegistrySnapshot& snapshot,
                           const std::vector<RouteDecision>& routes, absl::Time now) {
  AdmissionController::Request r;
  r.ticket = id;
  r.tenant = AdmissionTenant(request);
  r.model = request.model->name();
  r.prompt_tokens = static_cast<int64_t>(request.prompt_ids.size());
  r.max_tokens = request.max_tokens;
  r.n = request.n;
  r.deadline = request.deadline;
  PrefillQueue workers = PrefillQueueFor(snapshot, request.model->worker_model_id(), config_.mode, now);
  // The queue ahead is the one on the worker(s) picked, not the shortest:
  // the picker weighs KV space and running requests, not only queued
  // prefill, so it may pick another.
  if (!routes.empty()) {
    int64_t picked = 0;
    for (const RouteDecision& route : routes) {
      const WorkerInfo* w = route.colocated ? route.decode : route.prefill;
      if (w != nullptr) {
        picked = std::max(picked, w->desc.load.queued_prefill_tokens);
        r.workers.push_back(w->address);
      }
    }
    workers.queued_tokens = std::max(workers.queued_tokens, picked);
  }
  const AdmissionDecision d = admission_.Admit(r, workers, now);
  if (!d.admitted()) {
    metrics_.CountAdmissionRejection(AdmissionReasonName(d.reason), r.tenant);
    VLOG(1) << "admission: request_id=" << request.request_id << " tenant=" << r.tenant
            << " refused: " << d.message;
    return d.ToStatus();
  }
  VLOG(1) << "admission: request_id=" << request.request_id << " tenant=" << r.tenant
          << " admitted: "
          << (d.explanation.empty() ? "nothing queued ahead" : d.explanation);
  metrics_.ObserveAdmittedEstimate(r.model, d.estimated_ttft, config_.admission.max_ttft);
  ReportAdmissionQueue(r.model);
  return absl::OkStatus();
}

void Router::FirstToken(uint64_t run_id, const std::string& model) {
  admission_.FirstToken(run_id, clock_.Now());
  ReportAdmissionQueue(model);
}

void Router::ReportAdmissionQueue(const std::string& model) {
  const AdmissionController::QueueState q = admission_.queue(model);
  metrics_.SetAdmissionQueue(model, q.requests, q.peak_requests, q.rate, q.version);
}

void Router::ReleaseSlot() {
  inflight_.fetch_sub(1, std::memory_order_relaxed);
  metrics_.inflight->Set(inflight_.load(std::memory_order_relaxed));
}

void Router::AddLocalLoad(const std::string& address, const LocalLoad& delta, int sign) {
  absl::MutexLock lock(&mu_);
  LocalLoad& l = local_load_[address];
  l.requests += sign * delta.requests;
  l.prompt_tokens += sign * delta.prompt_tokens;
  l.kv_blocks += sign * delta.kv_blocks;
  if (l.requests <= 0) {
    local_load_.erase(address);
  }
}

uint64_t Router::TrackCall(const std::string& address, std::weak_ptr<ChoiceCall> call) {
  absl::MutexLock lock(&mu_);
  const uint64_t id = next_id_++;
  calls_[address][id] = std::move(call);
  return id;
}

void Router::UntrackCall(const std::string& address, uint64_t id) {
  absl::MutexLock lock(&mu_);
  auto it = calls_.find(address);
  if (it == calls_.end()) {
    return;
  }
  it->second.erase(id);
  if (it->second.empty()) {
    calls_.erase(it);
  }
}

void Router::OnWorkerDeparted(const std::string& address, const absl::Status& why) {
  std::vector<std::shared_ptr<ChoiceCall>> calls;
  {
    absl::MutexLock lock(&mu_);
    auto it = calls_.find(address);
    if (it == calls_.end()) {
      return;
    }
    for (auto& [id, weak] : it->second) {
      if (std::shared_ptr<ChoiceCall> c = weak.lock()) {
        calls.push_back(std::move(c));
      }
    }
  }
  for (auto& c : calls) {
    c->OnWorkerDeparted(address, why);
  }
}

void Router::Shutdown(absl::Duration grace) {
  {
    absl::MutexLock lock(&mu_);
    shutting_down_ = true;
  }
  const absl::Time give_up = absl::Now() + grace;
  while (inflight() > 0 && absl::Now() < give_up) {
    absl::SleepFor(absl::Milliseconds(10));
  }
  std::vector<std::shared_ptr<RequestRun>> runs;
  {
    absl::MutexLock lock(&mu_);
    for (auto& [id, weak] : runs_) {
      if (std::shared_ptr<RequestRun> r = weak.lock()) {
        runs.push_back(std::move(r));
      }
    }
  }
  for (auto& r : runs) {
    r->CancelWith(absl::UnavailableError("the router is shutting down"));
  }
  runs.clear();
  // Cancelled calls end within moments; a stuck one would be a gRPC bug, so
  // bound the wait rather than hang shutdown.
  const absl::Time hard = absl::Now() + absl::Seconds(30);
  while (inflight() > 0 && absl::Now() < hard) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  if (inflight() > 0) {
    LOG(ERROR) << "router: " << inflight() << " requests still running at shutdown";
  }
}

}  // namespace tandem::router
