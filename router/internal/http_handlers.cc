#include "router/internal/http_handlers.h"

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/time/clock.h"
#include "nlohmann/json.hpp"
#include "router/api_error.h"
#include "router/readiness.h"

namespace tandem::router::internal {
namespace {

// Hands the router's events to the exchange's strand. Never blocks.
class PostingObserver : public GenerationObserver {
 public:
  PostingObserver(std::weak_ptr<GenerationExchange> exchange, PostFn post,
                  std::atomic<int>& unfinished)
      : exchange_(std::move(exchange)), post_(std::move(post)), unfinished_(unfinished) {}

  void OnDelta(const ChoiceDelta& d) override {
    GenerationExchange::Event e;
    e.kind = GenerationExchange::Event::kDelta;
    e.delta = d;
    Post(std::move(e));
  }
  void OnChoiceDone(const ChoiceResult& r) override {
    GenerationExchange::Event e;
    e.kind = GenerationExchange::Event::kChoiceDone;
    e.result = r;
    Post(std::move(e));
  }
  void OnComplete(const absl::Status& status, const RequestSummary& s) override {
    GenerationExchange::Event e;
    e.kind = GenerationExchange::Event::kComplete;
    e.status = status;
    e.summary = s;
    Post(std::move(e));
    // Pairs with the server's acquire load in Stop: the post above happened.
    unfinished_.fetch_sub(1, std::memory_order_release);
  }

 private:
  void Post(GenerationExchange::Event e) {
    auto shared = std::make_shared<GenerationExchange::Event>(std::move(e));
    post_([weak = exchange_, shared] {
      if (std::shared_ptr<GenerationExchange> x = weak.lock()) {
        x->OnEvent(std::move(*shared));
      }
    });
  }

  const std::weak_ptr<GenerationExchange> exchange_;
  const PostFn post_;
  std::atomic<int>& unfinished_;
};

// On the prepare executor (or the strand, without one): Router::Prepare and
// Router::Start for one exchange, whose outcome goes to the strand. Touches
// no member of the exchange (the strand owns them); skips the work when the
// client left while the task waited.
void PrepareAndStart(HttpContext& ctx, GenerationRequest gen,
                     const std::weak_ptr<GenerationExchange>& weak, const PostFn& post) {
  Router& router = ctx.router;
  auto fail = [&](const absl::Status& s) {
    post([weak, s] {
      if (std::shared_ptr<GenerationExchange> x = weak.lock()) {
        x->OnStartFailed(s);
      }
    });
  };
  if (!weak.expired()) {
    absl::StatusOr<PreparedRequest> prepared = router.Prepare(gen, absl::InfiniteFuture());
    if (!prepared.ok()) {
      router.RecordRejected(gen.model, prepared.status());
      fail(prepared.status());
    } else {
      GenerationExchange::Started started;
      started.model = prepared->model;
      started.deadline = prepared->deadline;
      started.client_request_id = prepared->client_request_id;
      started.route_pool = prepared->route_pool;
      started.complexity_score = prepared->complexity_score;
      ctx.unfinished_requests.fetch_add(1, std::memory_order_relaxed);  // its OnComplete
      absl::StatusOr<std::shared_ptr<RequestHandle>> handle = router.Start(
          *std::move(prepared), std::make_shared<PostingObserver>(weak, post, ctx.unfinished_requests));
      if (!handle.ok()) {
        // No OnComplete will come.
        ctx.unfinished_requests.fetch_sub(1, std::memory_order_relaxed);
        fail(handle.status());
      } else {
        started.handle = *std::move(handle);
        post([weak, started]() mutable {
          if (std::shared_ptr<GenerationExchange> x = weak.lock()) {
            x->OnStarted(std::move(started));
          } else {
            started.handle->Cancel();  // the client left meanwhile
          }
        });
      }
    }
  }
  // Pairs with the server's acquire load in Stop: this task's posts happened.
  ctx.unfinished_requests.fetch_sub(1, std::memory_order_release);
}

HttpResponse JsonResponse(int status, std::string body) {
  HttpResponse r;
  r.status = status;
  r.body = std::move(body);
  return r;
}

HttpResponse Readiness(HttpContext& ctx) {
  Router& router = ctx.router;
  std::shared_ptr<const RegistrySnapshot> snap = router.snapshot();
  const absl::Time now = router.clock().Now();
  const std::vector<ModelReadiness> models =
      CheckReadiness(router.catalog(), router.config().mode, *snap, now);
  const bool ready = AllReady(models);
  nlohmann::json per_model = nlohmann::json::array();
  for (const ModelReadiness& m : models) {
    per_model.push_back(
        {{"model", m.model},
         {"ready", m.ready},
         {"reason", m.reason},
         {"workers", {{"prefill", m.prefill}, {"decode", m.decode}, {"colocated", m.colocated}}}});
  }
  nlohmann::json body = {{"status", ready ? "ok" : "unavailable"},
                         {"models", std::move(per_model)},
                         {"inflight", router.inflight()},
                         {"workers",
                          {{"prefill", snap->CountLive(WorkerRole::kPrefill, now)},
                           {"decode", snap->CountLive(WorkerRole::kDecode, now)},
                           {"colocated", snap->CountLive(WorkerRole::kColocated, now)},
                           {"known", snap->workers.size()}}}};
  return JsonResponse(ready ? 200 : 503, body.dump());
}

HttpResponse Liveness(HttpContext& ctx) {
  const absl::Status live = ctx.liveness ? ctx.liveness() : absl::OkStatus();
  nlohmann::json body = {{"status", live.ok() ? "ok" : "unavailable"}};
  if (!live.ok()) {
    body["reason"] = std::string(live.message());
  }
  return JsonResponse(live.ok() ? 200 : 503, body.dump());
}

HttpResponse Models(HttpContext& ctx) {
  return JsonResponse(200, ModelListJson(ctx.router.catalog(), absl::ToUnixSeconds(absl::Now())));
}

HttpResponse Metrics(HttpContext& ctx) {
  ctx.router.metrics().SetWorkersUp(*ctx.router.snapshot(), ctx.router.clock().Now());
  HttpResponse r;
  r.content_type = "text/plain; version=0.0.4; charset=utf-8";
  r.body = ctx.metrics.RenderText();
  return r;
}

struct Route {
  const char* path;
  const char* method;
  HttpResponse (*simple)(HttpContext&);      // null for the generation routes
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
};

constexpr Route kRoutes[] = {
    {"/v1/completions", "POST", nullptr, OpenAiEndpoint::kCompletions},
    {"/v1/chat/completions", "POST", nullptr, OpenAiEndpoint::kChat},
    {"/v1/models", "GET", &Models},
    {"/health", "GET", &Readiness},
    {"/health/ready", "GET", &Readiness},
    {"/health/live", "GET", &Liveness},
    {"/metrics", "GET", &Metrics},
};

}  // namespace

std::string HttpRequest::Header(absl::string_view name) const {
  for (const auto& [key, value] : headers) {
    if (absl::EqualsIgnoreCase(key, name)) {
      return value;
    }
  }
  return "";
}

HttpResponse ErrorResponse(const absl::Status& s, absl::Duration retry_after) {
  HttpResponse r = JsonResponse(HttpStatusFor(s.code()), OpenAiErrorJson(s));
  if (s.code() == absl::StatusCode::kResourceExhausted ||
      s.code() == absl::StatusCode::kUnavailable) {
    r.headers.emplace_back("Retry-After", RetryAfterSeconds(RetryAfter(s, retry_after)));
  }
  return r;
}

std::shared_ptr<GenerationExchange> Dispatch(HttpContext& ctx, const HttpRequest& request,
                                             ResponseSink& sink, const PostFn& post) {
  // API keys: before routing, so that unknown routes answer 401 too.
  HttpAuthDecision auth =
      AuthorizeHttp(ctx.api_keys, request.path, request.Header("Authorization"));
  if (!auth.allowed) {
    HttpResponse r = JsonResponse(auth.http_status, std::move(auth.body));
    r.headers.emplace_back("WWW-Authenticate", "Bearer");
    sink.Respond(std::move(r));
    return nullptr;
  }
  const Route* path_match = nullptr;
  for (const Route& route : kRoutes) {
    if (request.path != route.path) {
      continue;
    }
    path_match = &route;
    if (request.method != route.method) {
      continue;
    }
    if (route.simple != nullptr) {
      sink.Respond(route.simple(ctx));
      return nullptr;
    }
    return GenerationExchange::Start(ctx, route.endpoint, request, std::move(auth.tenant), sink,
                                     post);
  }
  if (path_match != nullptr) {
    HttpResponse r = ErrorResponse(
        WithErrorCode(absl::InvalidArgumentError(absl::StrCat(
                          request.method, " is not allowed on ", request.path, "; use ",
                          path_match->method)),
                      "method_not_allowed"),
        absl::ZeroDuration());
    r.status = 405;
    r.headers.emplace_back("Allow", path_match->method);
    sink.Respond(std::move(r));
    return nullptr;
  }
  sink.Respond(ErrorResponse(
      absl::NotFoundError(absl::StrCat("no route for ", request.method, " ", request.path)),
      absl::ZeroDuration()));
  return nullptr;
}

std::shared_ptr<GenerationExchange> GenerationExchange::Start(HttpContext& ctx,
                                                              OpenAiEndpoint endpoint,
                                                              const HttpRequest& request,
                                                              std::string tenant,
                                                              ResponseSink& sink, PostFn post) {
  Router& router = ctx.router;
  const absl::Duration retry_after = router.config().limits.retry_after;
  absl::StatusOr<OpenAiRequest> parsed = ParseOpenAiRequest(endpoint, request.body);
  if (!parsed.ok()) {
    router.RecordRejected("", parsed.status());
    sink.Respond(ErrorResponse(parsed.status(), retry_after));
    return nullptr;
  }
  if (ctx.api_keys.enabled()) {  // the tenant comes from the key only
    parsed->gen.tenant = std::move(tenant);
  }
  if (std::string rid = request.Header("X-Request-Id"); !rid.empty()) {
    parsed->gen.request_id = std::move(rid);
  }
  parsed->gen.cache_control = request.Header("Cache-Control");
  auto x = std::make_shared<GenerationExchange>(ctx, sink);
  x->endpoint_ = endpoint;
  x->request_ = *std::move(parsed);
  // The task's own posts (see HttpContext::unfinished_requests).
  ctx.unfinished_requests.fetch_add(1, std::memory_order_relaxed);
  base::Executor::Task task = [&ctx, gen = x->request_.gen,
                               weak = std::weak_ptr<GenerationExchange>(x), post]() mutable {
    PrepareAndStart(ctx, std::move(gen), weak, post);
  };
  if (ctx.prepare == nullptr) {
    std::move(task)();
  } else if (!ctx.prepare->Post(std::move(task))) {
    ctx.unfinished_requests.fetch_sub(1, std::memory_order_relaxed);
    const absl::Status s = absl::ResourceExhaustedError(absl::StrCat(
        "the router has ", ctx.prepare->max_queued(),
        " HTTP requests waiting to be prepared (limits.max_inflight); retry later"));
    router.RecordRejected(x->request_.gen.model, s);
    sink.Respond(ErrorResponse(s, retry_after));
    return nullptr;
  }
  return x;
}

void GenerationExchange::OnStarted(Started started) {
  preparing_ = false;
  handle_ = std::move(started.handle);
  if (done_) {  // abandoned while preparing
    handle_->Cancel();
    return;
  }
  cache_status_ = handle_->cache_status();
  deadline_ = started.deadline;
  request_id_ = std::move(started.client_request_id);
  route_pool_ = std::move(started.route_pool);
  complexity_score_ = started.complexity_score;
  builder_ = std::make_unique<OpenAiResponseBuilder>(
      request_, *started.model,
      absl::StrCat(endpoint_ == OpenAiEndpoint::kChat ? "chatcmpl-" : "cmpl-", request_id_),
      absl::ToUnixSeconds(absl::Now()));
  std::vector<Event> early = std::move(early_events_);
  early_events_.clear();
  for (Event& e : early) {
    OnEvent(std::move(e));
  }
}

void GenerationExchange::OnStartFailed(const absl::Status& s) {
  preparing_ = false;
  if (done_) {
    return;
  }
  done_ = true;
  sink_.Respond(ErrorResponse(s, ctx_.router.config().limits.retry_after));
}

void GenerationExchange::AddRequestHeaders(
    std::vector<std::pair<std::string, std::string>>& headers) const {
  headers.emplace_back("X-Request-Id", request_id_);
  if (!route_pool_.empty()) {  // complexity routing chose the model
    headers.emplace_back("X-Tandem-Route-Pool", route_pool_);
    headers.emplace_back("X-Tandem-Complexity", absl::StrFormat("%.4f", complexity_score_));
  }
}

void GenerationExchange::Fail(const absl::Status& s) {
  HttpResponse r = ErrorResponse(s, ctx_.router.config().limits.retry_after);
  AddRequestHeaders(r.headers);
  sink_.Respond(std::move(r));
}

void GenerationExchange::OnEvent(Event e) {
  if (preparing_) {
    early_events_.push_back(std::move(e));
    return;
  }
  if (done_) {
    return;
  }
  // A request that fails before any output gets a real HTTP status, not a
  // 200 stream carrying an error.
  if (request_.stream && !streaming_ &&
      !(e.kind == Event::kComplete && !e.status.ok())) {
    HttpResponse head;
    head.content_type = "text/event-stream";
    head.headers.emplace_back("Cache-Control", "no-cache");
    AddRequestHeaders(head.headers);
    AddCacheHeader(head);
    sink_.StartStream(std::move(head));
    streaming_ = true;
  }
  last_write_ = absl::Now();
  switch (e.kind) {
    case Event::kDelta:
      if (streaming_) {
        for (const std::string& chunk : builder_->OnDelta(e.delta)) {
          sink_.WriteChunk(SseEvent(chunk));
        }
      } else {
        builder_->OnDelta(e.delta);
      }
      break;
    case Event::kChoiceDone:
      if (streaming_) {
        sink_.WriteChunk(SseEvent(builder_->OnChoiceDone(e.result)));
      } else {
        builder_->OnChoiceDone(e.result);
      }
      break;
    case Event::kComplete:
      done_ = true;
      if (!streaming_) {
        if (!e.status.ok()) {
          Fail(e.status);
          return;
        }
        HttpResponse r;
        r.body = builder_->FinalResponse(e.summary);
        AddRequestHeaders(r.headers);
    AddCacheHeader(r);
        sink_.Respond(std::move(r));
        return;
      }
      if (!e.status.ok()) {
        sink_.WriteChunk(SseEvent(OpenAiErrorJson(e.status)));
      } else if (request_.include_usage) {
        sink_.WriteChunk(SseEvent(builder_->UsageChunk(e.summary)));
      }
      sink_.WriteChunk(SseDone());
      sink_.EndStream();
      break;
  }
}

void GenerationExchange::AddCacheHeader(HttpResponse& r) const {
  if (cache_status_ != CacheStatus::kBypass) {
    r.headers.emplace_back("x-tandem-cache", CacheStatusName(cache_status_));
  }
}

void GenerationExchange::Tick(absl::Time now) {
  if (done_ || preparing_) {
    return;
  }
  if (streaming_ && now - last_write_ > absl::Seconds(5)) {
    sink_.WriteChunk(SseKeepAlive());
    last_write_ = now;
  }
  if (!cancelled_late_ && now > deadline_ + absl::Seconds(5)) {
    handle_->Cancel();
    cancelled_late_ = true;
  }
}

void GenerationExchange::Abandon() {
  if (!done_) {
    done_ = true;
    if (handle_ != nullptr) {  // else OnStarted cancels it, or nothing started
      handle_->Cancel();
    }
  }
}

}  // namespace tandem::router::internal
