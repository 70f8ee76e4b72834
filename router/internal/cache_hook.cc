// Router::ServeFromCache: the response cache's step of Router::Start
// (router/semantic_cache.h). A hit is replayed through the same observer
// calls a generation makes (OnRoute, one OnDelta per delta the worker's
// stream produced, OnChoiceDone, OnComplete with usage), so both fronts
// stream it as they stream a generation; a miss stores the answer when the
// request completes successfully.

#include <optional>
#include <utility>

#include "common/base/logging.h"
#include "router/router.h"

namespace tandem::router {
namespace {

// The handle of a replayed hit: already finished when returned.
class ReplayedHandle : public RequestHandle {
 public:
  explicit ReplayedHandle(CacheStatus status) : status_(status) {}
  void Cancel() override {}
  CacheStatus cache_status() const override { return status_; }

 private:
  const CacheStatus status_;
};

// Forwards every event to the front's observer and keeps choice 0's deltas;
// stores them when the request completes OK and the choice finished (stop or
// length). A failed, cancelled or client-abandoned request stores nothing.
// Calls come one at a time (GenerationObserver's contract): no lock.
class StoringObserver : public GenerationObserver {
 public:
  StoringObserver(SemanticCache& cache, CacheRequest request, std::optional<Embedding> embedding,
                  std::shared_ptr<GenerationObserver> inner)
      : cache_(cache),
        request_(std::move(request)),
        embedding_(std::move(embedding)),
        inner_(std::move(inner)) {}

  void OnRoute(int32_t index, const RouteSummary& route) override { inner_->OnRoute(index, route); }
  void OnDelta(const ChoiceDelta& delta) override {
    if (delta.index == 0) {
      answer_.deltas.push_back(delta);
    }
    inner_->OnDelta(delta);
  }
  void OnChoiceDone(const ChoiceResult& result) override {
    if (result.index == 0) {
      answer_.result = result;
      finished_ = result.reason != FinishReason::kCancelled;
    }
    inner_->OnChoiceDone(result);
  }
  void OnComplete(const absl::Status& status, const RequestSummary& summary) override {
    // Stored before the client hears the end: its next request finds it.
    if (status.ok() && finished_) {
      cache_.Insert(request_, embedding_.has_value() ? &*embedding_ : nullptr, std::move(answer_));
    }
    inner_->OnComplete(status, summary);
  }

 private:
  SemanticCache& cache_;  // the Router's; outlives its requests
  const CacheRequest request_;
  const std::optional<Embedding> embedding_;
  const std::shared_ptr<GenerationObserver> inner_;
  CachedAnswer answer_;
  bool finished_ = false;
};

}  // namespace

std::shared_ptr<RequestHandle> Router::ServeFromCache(
    uint64_t id, const PreparedRequest& request, std::shared_ptr<GenerationObserver>& observer,
    CacheStatus* status) {
  const std::string& model = request.model->name();
  const absl::Time start = clock_.Now();
  std::optional<CacheHit> hit = cache_->LookupExact(request.cache);
  std::optional<Embedding> embedding;
  const char* tier = "exact";
  if (!hit.has_value() && embedder_ != nullptr && cache_->WantsEmbedding(request.cache)) {
    absl::StatusOr<Embedding> e = embedder_->Embed(request.cache.text);
    if (!e.ok()) {
      LOG(WARNING) << "semantic cache: embedding failed, exact tier only: " << e.status();
    } else if (!e->truncated) {
      tier = "semantic";
      embedding = *std::move(e);
      hit = cache_->LookupSemantic(request.cache, *embedding);
    }
  }
  if (!hit.has_value()) {
    metrics_.CountCache(model, tier, /*hit=*/false);
    *status = CacheStatus::kMiss;
    if (!request.cache.policy.no_store) {
      observer = std::make_shared<StoringObserver>(*cache_, request.cache, std::move(embedding),
                                                   std::move(observer));
    }
    return nullptr;
  }
  metrics_.CountCache(model, CacheTierName(hit->tier), /*hit=*/true);
  *status = hit->tier == CacheTier::kExact ? CacheStatus::kHitExact : CacheStatus::kHitSemantic;

  RequestSummary s;
  s.request_id = request.request_id;
  s.client_request_id = request.client_request_id;
  s.tenant = request.tenant;
  s.model = model;
  s.prompt_tokens = static_cast<int32_t>(request.prompt_ids.size());
  s.route.model = model;
  s.route.cache_hit = true;
  observer->OnRoute(0, s.route);
  absl::Time first = absl::InfinitePast();
  for (const ChoiceDelta& d : hit->answer->deltas) {
    if (first == absl::InfinitePast() && !d.tokens.empty()) {
      first = clock_.Now();
    }
    observer->OnDelta(d);
  }
  observer->OnChoiceDone(hit->answer->result);
  const absl::Time end = clock_.Now();
  s.completion_tokens = hit->answer->result.completion_tokens;
  s.choices.push_back(hit->answer->result);
  s.total = end - start;
  s.ttft = (first == absl::InfinitePast() ? end : first) - start;
  s.decode = end - (first == absl::InfinitePast() ? end : first);
  RunFinished(id, absl::OkStatus(), s, absl::ZeroDuration());
  observer->OnComplete(absl::OkStatus(), s);
  return std::make_shared<ReplayedHandle>(*status);
}

}  // namespace tandem::router
