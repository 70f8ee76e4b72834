#pragma once
// What a front (gRPC Generate, OpenAI HTTP) receives while the router runs a
// request: routing decisions, text deltas per choice, the end of each choice
// and one final completion with usage and timings.

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/time.h"

namespace tandem::router {

enum class FinishReason { kLength, kStop, kCancelled };
// "length", "stop", "cancelled".
const char* FinishReasonName(FinishReason r);

struct TopLogprob {
  int32_t token = 0;
  float logprob = 0;
};

struct TokenOutput {
  int32_t id = 0;
  float logprob = 0;                    // when the request asked for logprobs
  std::vector<TopLogprob> top_logprobs; // most likely first
};

struct ChoiceDelta {
  int32_t index = 0;
  // Complete UTF-8 (never part of a code point), stop strings removed; may be
  // empty while bytes are held back (a partial code point or a possible
  // stop-string prefix).
  std::string text;
  std::vector<TokenOutput> tokens;      // the tokens received since the last delta
};

struct RouteSummary {
  std::string model;
  std::string prefill_worker;           // "" when colocated
  std::string decode_worker;
  bool colocated = false;
  int32_t attempt = 0;                  // 0 = first try
  bool cache_hit = false;               // answered from the response cache, no worker
};

struct ChoiceResult {
  int32_t index = 0;
  FinishReason reason = FinishReason::kLength;
  int32_t completion_tokens = 0;
};

struct RequestSummary {
  std::string request_id;               // the router's (worker key); for logs only
  std::string client_request_id;        // the client's, echoed
  std::string tenant;                   // the API key's tenant ("" = keys off); logs only
  std::string model;
  int32_t prompt_tokens = 0;
  int32_t completion_tokens = 0;        // all choices
  int32_t cached_prompt_tokens = 0;
  RouteSummary route;                   // of choice 0
  std::vector<ChoiceResult> choices;    // by index (finished ones)
  absl::Duration queue = absl::ZeroDuration();       // admission -> KV reserved / stream open
  absl::Duration ttft = absl::ZeroDuration();        // admission -> first token
  absl::Duration prefill = absl::ZeroDuration();     // as the prefill worker reports
  absl::Duration kv_transfer = absl::ZeroDuration();
  absl::Duration decode = absl::ZeroDuration();      // first token -> end
  absl::Duration total = absl::ZeroDuration();
};

// Receives one request's events. The router calls it from gRPC threads, one
// call at a time per request, in order: OnRoute / OnDelta / OnChoiceDone in
// any interleaving across choices, then OnComplete exactly once (also after
// cancellation). Implementations must not block; calling the handle's
// Cancel() from a callback is allowed.
class GenerationObserver {
 public:
  virtual ~GenerationObserver() = default;
  virtual void OnRoute(int32_t /*index*/, const RouteSummary& /*route*/) {}
  virtual void OnDelta(const ChoiceDelta& delta) = 0;
  virtual void OnChoiceDone(const ChoiceResult& result) = 0;
  // `status` is OK when every choice finished (length / stop).
  virtual void OnComplete(const absl::Status& status, const RequestSummary& summary) = 0;
};

// How the response cache (router/semantic_cache.h) served a request.
enum class CacheStatus { kBypass, kMiss, kHitExact, kHitSemantic };
// "bypass", "miss", "hit-exact", "hit-semantic" (the x-tandem-cache header).
const char* CacheStatusName(CacheStatus s);

// A started request. Any thread.
class RequestHandle {
 public:
  virtual ~RequestHandle() = default;
  // Known when Start returns: bypass (not cacheable or cache off), miss (a
  // worker generates; the answer is stored when it completes) or a hit (the
  // events were replayed from the cache before Start returned).
  virtual CacheStatus cache_status() const { return CacheStatus::kBypass; }
  // Cancels every worker call of the request (best effort, idempotent); the
  // observer still gets OnComplete (CANCELLED unless the request finished).
  virtual void Cancel() = 0;
};

}  // namespace tandem::router
