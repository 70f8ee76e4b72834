#pragma once
// Complexity routing: a score in [0, 1] for a prompt, and the model pool
// (config `routing:`, router/config.h) that serves it. Requests naming the
// routed alias (`auto`), or no model at all while routing is configured, are
// scored and sent to a pool's model; a request naming a served model keeps
// it (an explicit model always wins, even when its workers are down).
//
// The score (every term in [0, 1]):
//
//   features  f = clamp(0.10 L + 0.30 C + 0.30 M + 0.40 R + 0.25 K - 0.35 E, 0, 1)
//     L  length: log2(tokens / 32) / log2(1024 / 32), clamped: 0 up to 32
//        tokens, 1 from 1024 (tokens of the first pool's tokenizer)
//     C  code: 1 for a ``` fence; else the larger of (code keywords / 3) and
//        (code-symbol density - 2 %) / 6 % ({}[]();=<>*&|^%\ per character)
//     M  math: (math words and notation, e.g. "integral", "prove", "\frac",
//        "x^2", "= 0") / 2
//     R  multi-step reasoning: (markers such as "step by step", "design",
//        "optimize", "trade-off", "implement", "algorithm", "concurrency",
//        plus 1 for a request to write code: a verb such as "write" or
//        "generate" with an artifact such as "script" or "function") / 2
//     K  constraints: (list items + constraint phrases such as "must",
//        "without using", "at most", "O(") / 4
//     E  simple task: (markers of a transformation or lookup whatever the
//        length, e.g. "summarize", "translate", "fix the grammar", "what is")
//        / 2 — this keeps long-but-easy prompts on the small pool
//   exemplars e = sum_p softmax_p(s_p / T) * p / (P - 1)
//     s_p: mean cosine of the prompt's embedding to the k most similar
//     exemplars of pool p (kNN, k = routing.neighbors; a pool without
//     exemplars takes no part), T = routing.temperature, P pools cheapest
//     first: the expected pool rank, 0 = surely the cheapest, 1 = surely the
//     largest. With two pools e = sigmoid((s_large - s_small) / T).
//   score     = w e + (1 - w) f, w = routing.embedding_weight; = f without an
//     embedder (or with fewer than two pools holding exemplars; the router
//     says so in its log at start).
//
// Features and the embedding read the first 16 KiB of the text (the length
// term saturates long before; the embedder keeps 256 tokens). The text scored is the prompt, or for chat the last user message
// (the question, not the system prompt or the history).
//
// The pool is the last whose min_score <= score. A pool with no live route
// (router/readiness.h) is skipped: larger pools are tried first (quality),
// then smaller ones; each skip is logged and counted; none left is
// UNAVAILABLE naming every pool and why.
//
// Metrics: tandem_route_decisions_total{pool} (pool "none" when none was
// live), tandem_route_pool_skipped_total{pool}.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/time/time.h"
#include "absl/types/span.h"
#include "common/base/metrics.h"
#include "router/config.h"
#include "router/embedder.h"
#include "router/model_catalog.h"
#include "router/registry.h"

namespace tandem::router {

// Prompt features, each term in [0, 1] (see the formula above).
struct PromptFeatures {
  int32_t tokens = 0;
  double length = 0;
  double code = 0;
  double math = 0;
  double reasoning = 0;
  double constraints = 0;
  double simple_task = 0;
};

// Pure functions; any thread.
PromptFeatures ExtractPromptFeatures(absl::string_view text, int32_t tokens);
double FeatureScore(const PromptFeatures& f);
// Mean of the k largest dot products of `v` with the rows (unit vectors:
// cosines); k is capped by the row count. -1 when there are no rows.
double KnnSimilarity(absl::Span<const float> v, const std::vector<std::vector<float>>& rows,
                     int k);
// The expected pool rank under softmax(similarity / temperature); pools with
// a similarity below -0.5 (no exemplars) take no part.
double ExemplarScore(absl::Span<const double> similarity, double temperature);
// The pool whose score range holds `score`.
size_t PoolForScore(const RoutingConfig& config, double score);

struct PoolHealth {
  bool live = false;
  std::string reason;  // why not live, e.g. "no live decode worker (mode disaggregated)"
};
struct PoolChoice {
  size_t pool = 0;
  std::vector<size_t> skipped;  // pools tried first, in order, that had no live route
};
// From the score's pool: itself, then larger pools ascending, then smaller
// ones descending; the first live one. UNAVAILABLE naming every pool and
// its reason when none is live.
absl::StatusOr<PoolChoice> ChoosePool(const RoutingConfig& config, double score,
                                      absl::Span<const PoolHealth> health);

struct ComplexityScore {
  double score = 0;
  double features_score = 0;
  double exemplar_score = -1;  // -1: not used (no embedder)
  PromptFeatures features;
};

struct RoutingDecision {
  std::string pool;
  const ServedModel* model = nullptr;
  ComplexityScore score;
  std::vector<std::string> skipped;  // pools skipped for want of a live worker
};

// Scores prompts and picks pools. Owned by the Router; built once at start.
// Thread-safe (the embedder batches concurrent callers).
class ComplexityRouter {
 public:
  // Resolves each pool's model in `catalog` (InvalidArgument naming
  // routing.pools[i].model), reads exemplars_file (NotFound naming it) and
  // embeds every exemplar with `embedder` (may be null: features only; logs
  // which). `catalog`, `embedder` and `metrics` must outlive the router.
  static absl::StatusOr<std::unique_ptr<ComplexityRouter>> Create(const RoutingConfig& config,
                                                                  const ModelCatalog& catalog,
                                                                  Embedder* embedder,
                                                                  base::MetricsRegistry& metrics);

  const RoutingConfig& config() const { return config_; }
  const std::string& alias() const { return config_.alias; }
  // Whether the exemplar term takes part (an embedder and two pools with exemplars).
  bool uses_embeddings() const { return use_embeddings_; }

  // The score alone (the accuracy test). Errors: the embedder's.
  absl::StatusOr<ComplexityScore> Score(absl::string_view text) const;
  // Scores `text` and picks a live pool from `snapshot`; counts the decision.
  absl::StatusOr<RoutingDecision> Route(absl::string_view text, RoutingMode mode,
                                        const RegistrySnapshot& snapshot, absl::Time now) const;

 private:
  ComplexityRouter(RoutingConfig config, const ModelCatalog& catalog, Embedder* embedder)
      : config_(std::move(config)), catalog_(catalog), embedder_(embedder) {}

  const RoutingConfig config_;
  const ModelCatalog& catalog_;
  Embedder* const embedder_;
  bool use_embeddings_ = false;
  std::vector<const ServedModel*> models_;                  // per pool
  std::vector<std::vector<std::vector<float>>> exemplars_;  // per pool, unit vectors
  std::vector<base::Counter*> decisions_;                   // per pool, then "none"
  std::vector<base::Counter*> skipped_;                     // per pool
};

}  // namespace tandem::router
