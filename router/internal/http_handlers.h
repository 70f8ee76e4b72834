#pragma once
// The OpenAI HTTP front's routes, apart from the sockets: every parsed
// request goes through Dispatch(), which picks a handler by method and path.
// Handlers take an HttpRequest and answer on a ResponseSink (the connection,
// see http_connection.h): the simple routes at once, the generation routes
// through a GenerationExchange that relays the router's events as they
// arrive.
//
// Threads: everything here runs on the connection's strand, except
//   - a generation's preparation (Router::Prepare and Router::Start:
//     tokenizing, the embeddings of complexity routing and the semantic
//     cache, the cache lookup, placement), which runs on the server's
//     prepare executor (HttpContext::prepare) and posts its outcome to the
//     strand, so no I/O thread ever waits for an embedding;
//   - the GenerationObserver the exchange hands the router, which posts each
//     event to the strand (never blocks a router thread).

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "common/base/executor.h"
#include "common/base/metrics.h"
#include "router/auth.h"
#include "router/generation.h"
#include "router/openai_request.h"
#include "router/openai_response.h"
#include "router/router.h"

namespace tandem::router::internal {

struct HttpRequest {
  std::string method;  // "GET", "POST", ...
  std::string path;    // the target without its query
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  // The first value of header `name` (any case), "" when absent.
  std::string Header(absl::string_view name) const;
};

struct HttpResponse {
  int status = 200;
  std::string content_type = "application/json";
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  bool close = false;  // Connection: close, then a lingering close
};

// What a handler answers on. All calls on the connection's strand.
class ResponseSink {
 public:
  virtual ~ResponseSink() = default;
  // A whole response.
  virtual void Respond(HttpResponse response) = 0;
  // The status line and headers of a chunked response (`head.body` unused);
  // then WriteChunk any number of times and EndStream once.
  virtual void StartStream(HttpResponse head) = 0;
  // Queues one chunk. The connection closes itself (and cancels the
  // exchange) when a slow reader lets more than limits.max_stream_buffer_bytes
  // pile up.
  virtual void WriteChunk(std::string data) = 0;
  virtual void EndStream() = 0;
};

// Runs `fn` on the connection's strand (any thread; never blocks).
using PostFn = std::function<void(std::function<void()> fn)>;

// Shared by the server and its connections.
struct HttpContext {
  HttpContext(Router& r, base::MetricsRegistry& m, const ApiKeys& keys,
              std::function<absl::Status()> live)
      : router(r), metrics(m), api_keys(keys), liveness(std::move(live)) {}
  Router& router;
  base::MetricsRegistry& metrics;
  const ApiKeys& api_keys;  // router/auth.h; disabled: every route is open
  const std::function<absl::Status()> liveness;  // null = always live
  std::atomic<int> connections{0};
  // Started requests whose OnComplete has not been posted yet, and prepare
  // tasks that have not made their last post: the server waits for 0 before
  // it tears down the strands they post to.
  std::atomic<int> unfinished_requests{0};
  // Runs the generations' Prepare + Start (limits.prepare_threads threads,
  // limits.max_inflight waiting; full: 429 with Retry-After). Null: they run
  // on the calling thread (still answering through the strand).
  base::Executor* prepare = nullptr;
};

// One generation request (/v1/completions, /v1/chat/completions) from Start
// to the last byte. Owned by its connection; strand only (the observer it
// gives the router posts events here through PostFn).
class GenerationExchange : public std::enable_shared_from_this<GenerationExchange> {
 public:
  struct Event {
    enum Kind { kDelta, kChoiceDone, kComplete } kind = kDelta;
    ChoiceDelta delta;
    ChoiceResult result;
    absl::Status status;
    RequestSummary summary;
  };

  // What the prepare task hands the strand once Router::Start succeeded.
  struct Started {
    std::shared_ptr<RequestHandle> handle;
    const ServedModel* model = nullptr;
    absl::Time deadline = absl::InfiniteFuture();
    std::string client_request_id;
    std::string route_pool;
    double complexity_score = 0;
  };

  // Parses the request and queues its preparation (Prepare + Start) on
  // ctx.prepare. When parsing fails or the queue is full, answers the error
  // on `sink` and returns null; otherwise `sink` gets the response once the
  // preparation's outcome and the events arrive (a preparation error as a
  // whole error response).
  // `tenant`: the API key's (router/auth.h), "" without keys.
  static std::shared_ptr<GenerationExchange> Start(HttpContext& ctx, OpenAiEndpoint endpoint,
                                                   const HttpRequest& request,
                                                   std::string tenant, ResponseSink& sink,
                                                   PostFn post);

  GenerationExchange(HttpContext& ctx, ResponseSink& sink) : ctx_(ctx), sink_(sink) {}

  // The preparation's outcome (strand). Events that arrived before
  // OnStarted (a cached answer completes inside Router::Start) are replayed
  // after it.
  void OnStarted(Started started);
  void OnStartFailed(const absl::Status& s);
  void OnEvent(Event e);
  // About once a second while not done: an SSE keep-alive comment after 5 s
  // without output, and a cancel 5 s past the deadline (a backstop: worker
  // calls carry the deadline).
  void Tick(absl::Time now);
  // The client left or the connection is closing: cancel on the workers and
  // write nothing more.
  void Abandon();
  bool done() const { return done_; }

 private:
  void Fail(const absl::Status& s);
  // x-tandem-cache: miss | hit-exact | hit-semantic (none when bypassed).
  void AddCacheHeader(HttpResponse& r) const;

  HttpContext& ctx_;
  ResponseSink& sink_;
  OpenAiEndpoint endpoint_ = OpenAiEndpoint::kChat;
  bool preparing_ = true;  // until OnStarted / OnStartFailed
  std::vector<Event> early_events_;
  OpenAiRequest request_;
  std::unique_ptr<OpenAiResponseBuilder> builder_;
  std::shared_ptr<RequestHandle> handle_;
  std::string request_id_;
  absl::Time deadline_ = absl::InfiniteFuture();
  absl::Time last_write_ = absl::Now();
  bool streaming_ = false;  // the 200 head went out
  bool cancelled_late_ = false;
  bool done_ = false;
  CacheStatus cache_status_ = CacheStatus::kBypass;  // set by Start
  // Complexity routing (router/complexity.h); "" when the request named its model.
  std::string route_pool_;
  double complexity_score_ = 0;
  // X-Request-Id, and X-Tandem-Route-Pool / X-Tandem-Complexity when routed.
  void AddRequestHeaders(std::vector<std::pair<std::string, std::string>>& headers) const;
};

// The OpenAI error body with the matching HTTP status (and Retry-After when
// the client should retry: the status's own (WithRetryAfter), else
// `retry_after`).
HttpResponse ErrorResponse(const absl::Status& s, absl::Duration retry_after);

// Routes one parsed request. With API keys configured, every route (unknown
// ones too) but the public health / metrics paths first wants
// "Authorization: Bearer <key>": else 401, WWW-Authenticate: Bearer and the
// OpenAI error body (code "invalid_api_key"). Returns the exchange of a started generation
// (the connection keeps it until done()), else null after answering on
// `sink`.
std::shared_ptr<GenerationExchange> Dispatch(HttpContext& ctx, const HttpRequest& request,
                                             ResponseSink& sink, const PostFn& post);

}  // namespace tandem::router::internal
