#pragma once
// The router's response cache (docs/DESIGN.md section 5): answers a request
// from an earlier answer without any worker call.
//
// Two tiers, both keyed per (tenant, model):
//  - exact: SHA-256 of the tenant, the model, the whole conversation (every
//    message's role, trimmed content and tool calls, the tool definitions) or
//    the prompt text / token ids, and every parameter that changes the output
//    (max_tokens, sampling, seed, stop strings / ids, ignore_eos).
//  - semantic (vector): an HNSW index (hnswlib, inner product on the
//    embedder's unit vectors = cosine) over the embedding of the request's
//    *last user message* (or prompt text). A candidate answers only when
//      * its partition key matches: the same SHA-256 as the exact key but with
//        that last message left out, so the same tenant, model, parameters and
//        the same earlier turns (multi-turn requests key on the whole
//        conversation: only the last user message may be paraphrased);
//      * cosine >= the model's threshold (semantic_cache.thresholds, else
//        semantic_cache.threshold);
//      * the false-hit guard passes: the numbers, the negation count and the
//        named entities (capitalised words other than common sentence
//        starters like "What" or "Write", quoted spans, words with inner
//        capitals or digits) of both texts are equal —
//        "is" / "is not", "3 apples" / "4 apples", "Paris" / "Berlin" never hit;
//      * it is younger than the TTL (and the request's max-age).
//    Texts the embedder truncated (over embedding.max_seq_tokens) are cached
//    in the exact tier only: their vector does not cover the whole text.
// Capacity is bounded (semantic_cache.capacity entries over both tiers) with
// LRU eviction; an evicted entry's HNSW node is marked deleted and its slot
// (hnswlib label) reused by the next insert, so the index never holds more
// than `capacity` nodes.
//
// Which requests are cached (MakeCacheRequest): n == 1, no logprobs, and
// either greedy sampling (temperature 0) or an explicit Cache-Control from
// the client. Requests with tool definitions, prompt token ids, or a last
// message that is not the user's are exact-tier only.
//
// Thread-safe; one mutex (a search on 100 000 entries takes about a
// millisecond, bench/router/semantic_cache_benchmark.cc).

#include <cstdint>
#include <list>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_map.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/time.h"
#include "common/base/clock.h"
#include "router/config.h"
#include "router/embedder.h"
#include "router/generation.h"

namespace tandem::router {

struct GenerationRequest;
struct PreparedRequest;

// A request's Cache-Control (HTTP header, gRPC metadata `cache-control`).
// Directives, comma separated, case-insensitive:
//   no-store    the answer is not stored (a stored one may still answer);
//   no-cache    not answered from the cache (the fresh answer is stored);
//   max-age=N   answered only by an entry at most N seconds old.
// Sending any of them allows caching of a sampled (temperature > 0) request.
struct CachePolicy {
  bool given = false;
  bool no_store = false;
  bool no_cache = false;
  std::optional<absl::Duration> max_age;
};
// InvalidArgument naming the directive for anything else.
absl::StatusOr<CachePolicy> ParseCacheControl(absl::string_view value);

// What a request is cached under (Router::Prepare builds it).
struct CacheRequest {
  bool eligible = false;      // false: the cache is not consulted (bypass)
  CachePolicy policy;
  std::string tenant;
  std::string model;
  std::string exact_key;      // 32-byte SHA-256
  std::string partition_key;  // 32-byte SHA-256; "" = exact tier only
  std::string text;           // the vector tier's text; "" = exact tier only
};

// Builds the cache key of a prepared request (see the top of this file).
// InvalidArgument (param "Cache-Control") for a bad cache policy.
absl::StatusOr<CacheRequest> MakeCacheRequest(const GenerationRequest& request,
                                              const PreparedRequest& prepared);

// The false-hit guard's view of a text (see the top of this file).
struct GuardFeatures {
  std::vector<std::string> numbers;   // as written, "1,000" -> "1000", in order
  int32_t negations = 0;              // not, no, never, n't, without, ...
  std::vector<std::string> entities;  // lowercased, sorted, unique
  bool operator==(const GuardFeatures& o) const {
    return numbers == o.numbers && negations == o.negations && entities == o.entities;
  }
};
GuardFeatures ExtractGuardFeatures(absl::string_view text);

// One cached answer: the first choice's deltas as they were streamed, and
// how it ended.
struct CachedAnswer {
  std::vector<ChoiceDelta> deltas;
  ChoiceResult result;
};

enum class CacheTier { kExact, kSemantic };
const char* CacheTierName(CacheTier tier);  // "exact", "semantic"

struct CacheHit {
  CacheTier tier = CacheTier::kExact;
  float similarity = 1.0f;  // cosine; 1 for the exact tier
  std::shared_ptr<const CachedAnswer> answer;  // shared with the cache entry
};

class SemanticCache {
 public:
  // `dim`: the embedder's dimension (0: exact tier only). `config` valid
  // (RouterConfig::Validate).
  SemanticCache(SemanticCacheConfig config, int dim, base::Clock& clock);
  ~SemanticCache();
  SemanticCache(const SemanticCache&) = delete;
  SemanticCache& operator=(const SemanticCache&) = delete;

  // The model's similarity threshold.
  float Threshold(absl::string_view model) const;
  // Whether the vector tier applies to `req` (a dimension, not exact_only,
  // a text and a partition).
  bool WantsEmbedding(const CacheRequest& req) const;

  // Exact tier. Nothing for no-cache requests.
  std::optional<CacheHit> LookupExact(const CacheRequest& req);
  // Vector tier, with the embedding of req.text (a truncated one never hits).
  std::optional<CacheHit> LookupSemantic(const CacheRequest& req, const Embedding& embedding);

  // Stores `answer` (replacing any entry with the same exact key) unless the
  // request says no-store. With a non-truncated `embedding` of req.text the
  // entry also joins the vector tier. Evicts the least recently used entry
  // when full.
  void Insert(const CacheRequest& req, const Embedding* embedding, CachedAnswer answer);

  int64_t size() const;
  // HNSW nodes ever allocated (live + marked deleted awaiting reuse): never
  // over capacity.
  int64_t index_nodes() const;

 private:
  struct Entry;
  class Index;
  using Lru = std::list<Entry>;

  bool FreshLocked(const Entry& e, const CachePolicy& policy, absl::Time now) const
      ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);
  void EraseLocked(Lru::iterator it) ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_);

  const SemanticCacheConfig config_;
  const int dim_;
  base::Clock& clock_;

  mutable absl::Mutex mu_;
  Lru lru_ ABSL_GUARDED_BY(mu_);  // most recently used first
  absl::flat_hash_map<std::string, Lru::iterator> by_exact_ ABSL_GUARDED_BY(mu_);
  std::vector<Lru::iterator> by_slot_ ABSL_GUARDED_BY(mu_);  // HNSW label -> entry (or end)
  std::vector<uint32_t> free_slots_ ABSL_GUARDED_BY(mu_);
  std::unique_ptr<Index> index_ ABSL_GUARDED_BY(mu_);
};

}  // namespace tandem::router
