// The response cache at the router on a 100 000-entry index: what a cache hit
// costs from Router::Prepare to OnComplete (tokenize, key, exact lookup, one
// embedding, one HNSW search + guard, the replay), and its parts.
//
// The index: 100 000 entries in one (tenant, model) partition, the cached
// ShareGPT prompts of tests/data/semantic_cache/pairs.jsonl (their real
// all-MiniLM embeddings, each with a 16-delta answer) plus random unit
// vectors filling the rest (the worst case for HNSW: no cluster structure).
// Queries: the paraphrases of those prompts that hit (the "b" of the
// paraphrase pairs); exact hits re-send the cached prompt.
//
// Each benchmark reports real_p50_ms / real_p99_ms over its iterations, and
// cpu_p50_ms / cpu_p99_ms (the process's CPU time: the machine is shared). The
// setup (embedding and inserting 100 000 entries) takes about a minute.
//
//   build/bin/semantic_cache_benchmark --benchmark_min_time=2
//   TANDEM_EMBEDDING_PRECISION=bf16 build/bin/semantic_cache_benchmark --benchmark_min_time=2
//   TANDEM_EMBEDDING_THREADS=2 build/bin/semantic_cache_benchmark --benchmark_min_time=2
//
// TANDEM_EMBEDDING_PRECISION and TANDEM_EMBEDDING_THREADS set the router's
// embedding.precision and embedding.threads (the config's defaults when
// unset); TANDEM_ENCODER_AMX=0 keeps bf16 off AMX tiles on a CPU that has them
// (encoder_ops::SetAmxEnabled, to compare with AVX512-BF16). With more than
// one thread the CPU columns add up every thread's time: compare real time.
//
// Needs the models from scripts/fetch_models.sh --minilm and ../shared's
// stories260K (the served model whose tokenizer Prepare runs).

#include <benchmark/benchmark.h>

#include <algorithm>
#include <cstdlib>
#include <chrono>
#include <ctime>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <memory>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/base/metrics.h"
#include "common/engine/encoder_ops/gemm_bf16.h"
#include "nlohmann/json.hpp"
#include "router/embedder.h"
#include "router/router.h"

namespace tandem::router {
namespace {

constexpr int kEntries = 100000;

class NullObserver : public GenerationObserver {
 public:
  void OnDelta(const ChoiceDelta&) override {}
  void OnChoiceDone(const ChoiceResult&) override {}
  void OnComplete(const absl::Status&, const RequestSummary&) override {}
};

GenerationRequest Chat(const std::string& text) {
  GenerationRequest g;
  g.model = "stories260K";
  g.messages = std::vector<ChatMessage>{{"user", text}};
  g.max_tokens = 16;
  return g;
}

struct Setup {
  base::MetricsRegistry metrics;
  std::shared_ptr<Embedder> embedder;
  std::unique_ptr<Router> router;
  std::vector<std::string> cached;      // prompts in the cache
  std::vector<std::string> paraphrases; // their paraphrases that hit
  std::vector<Embedding> paraphrase_embeddings;
  std::string error;
};

Setup* Build() {
  auto* s = new Setup();
  EmbeddingConfig ec;
  ec.model = "all-minilm-l6-v2";
  if (const char* p = std::getenv("TANDEM_EMBEDDING_PRECISION"); p != nullptr) ec.precision = p;
  if (const char* t = std::getenv("TANDEM_EMBEDDING_THREADS"); t != nullptr) {
    ec.threads = std::atoi(t);
  }
  if (const char* a = std::getenv("TANDEM_ENCODER_AMX"); a != nullptr && std::string(a) == "0") {
    engine::encoder_ops::SetAmxEnabled(false);
  }
  absl::StatusOr<std::unique_ptr<Embedder>> embedder = Embedder::Load(ec);
  if (!embedder.ok()) {
    s->error = std::string(embedder.status().message());
    return s;
  }
  s->embedder = std::move(*embedder);
  RouterConfig config;
  config.models.push_back(
      {"stories260K", TANDEM_SHARED_DIR "/models/stories260K/stories260K.gguf", "", ""});
  config.embedding = ec;
  config.semantic_cache.enabled = true;
  config.semantic_cache.capacity = kEntries;
  absl::StatusOr<ModelCatalog> catalog = ModelCatalog::Load(config.models);
  if (!catalog.ok()) {
    s->error = std::string(catalog.status().message());
    return s;
  }
  s->router = std::make_unique<Router>(
      config, *std::move(catalog), [] { return std::make_shared<const RegistrySnapshot>(); },
      s->metrics, base::RealClock::Get(), s->embedder);
  SemanticCache& cache = *s->router->semantic_cache();

  std::ifstream in(TANDEM_SOURCE_DIR "/tests/data/semantic_cache/pairs.jsonl");
  std::vector<std::pair<std::string, std::string>> pairs;
  for (std::string line; std::getline(in, line);) {
    nlohmann::json j = nlohmann::json::parse(line);
    if (j["kind"] == "paraphrase") pairs.emplace_back(j["a"], j["b"]);
  }
  CachedAnswer answer;
  for (int i = 0; i < 16; ++i) {
    ChoiceDelta d;
    d.text = " word";
    d.tokens.emplace_back();
    d.tokens.back().id = 100 + i;
    answer.deltas.push_back(d);
  }
  answer.result.reason = FinishReason::kLength;
  answer.result.completion_tokens = 16;

  // Random fill in the same partition as the real prompts.
  absl::StatusOr<PreparedRequest> probe = s->router->Prepare(Chat("probe"), absl::InfiniteFuture());
  if (!probe.ok()) {
    s->error = std::string(probe.status().message());
    return s;
  }
  std::mt19937 rng(1);
  std::normal_distribution<float> normal;
  const int fill = kEntries - static_cast<int>(pairs.size());
  const auto t0 = std::chrono::steady_clock::now();
  for (int i = 0; i < fill; ++i) {
    CacheRequest r = probe->cache;
    r.exact_key = absl::StrCat("fill ", i);
    r.text = "filler";
    Embedding e;
    e.vector.resize(s->embedder->dim());
    float norm = 0;
    for (float& x : e.vector) {
      x = normal(rng);
      norm += x * x;
    }
    for (float& x : e.vector) x /= std::sqrt(norm);
    cache.Insert(r, &e, answer);
  }
  for (const auto& [a, b] : pairs) {
    absl::StatusOr<PreparedRequest> p = s->router->Prepare(Chat(a), absl::InfiniteFuture());
    absl::StatusOr<Embedding> e = s->embedder->Embed(p->cache.text);
    cache.Insert(p->cache, &*e, answer);
    s->cached.push_back(a);
  }
  const double build_s =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  int hits = 0;
  for (const auto& [a, b] : pairs) {
    absl::StatusOr<PreparedRequest> p = s->router->Prepare(Chat(b), absl::InfiniteFuture());
    absl::StatusOr<Embedding> e = s->embedder->Embed(p->cache.text);
    if (cache.LookupSemantic(p->cache, *e).has_value()) {
      ++hits;
      s->paraphrases.push_back(b);
      s->paraphrase_embeddings.push_back(*e);
    }
  }
  std::fprintf(stderr,
               "index: %lld entries, %lld HNSW nodes, built in %.1f s; %d of %zu paraphrases hit "
               "on it\n",
               static_cast<long long>(cache.size()), static_cast<long long>(cache.index_nodes()),
               build_s, hits, pairs.size());
  return s;
}

Setup& Get() {
  static Setup* s = Build();
  return *s;
}

double ProcessCpuMs() {
  timespec ts;
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

void Percentiles(benchmark::State& state, const char* name, std::vector<double> ms) {
  if (ms.empty()) return;
  std::sort(ms.begin(), ms.end());
  state.counters[absl::StrCat(name, "_p50_ms")] = ms[ms.size() / 2];
  state.counters[absl::StrCat(name, "_p99_ms")] = ms[std::min(ms.size() - 1, ms.size() * 99 / 100)];
}

// Runs `step(i)` per iteration and reports the percentiles of its real time
// and of the process's CPU time (one request at a time: the CPU it costs,
// whatever else the machine runs).
template <typename Step>
void Timed(benchmark::State& state, Step step) {
  std::vector<double> real, cpu;
  size_t i = 0;
  for (auto _ : state) {
    const auto t0 = std::chrono::steady_clock::now();
    const double c0 = ProcessCpuMs();
    if (!step(i++)) {
      state.SkipWithError("not a cache hit");
      return;
    }
    cpu.push_back(ProcessCpuMs() - c0);
    real.push_back(
        std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count());
  }
  Percentiles(state, "real", std::move(real));
  Percentiles(state, "cpu", std::move(cpu));
}

bool SkipIfBroken(benchmark::State& state, Setup& s) {
  if (!s.error.empty() || s.paraphrases.empty()) {
    state.SkipWithError(s.error.empty() ? "no paraphrase hits" : s.error.c_str());
    return true;
  }
  return false;
}

// Prepare + Start of a request answered from the cache, to OnComplete.
bool RouterHit(Setup& s, const std::string& text, CacheStatus want) {
  absl::StatusOr<PreparedRequest> p = s.router->Prepare(Chat(text), absl::InfiniteFuture());
  if (!p.ok()) return false;
  absl::StatusOr<std::shared_ptr<RequestHandle>> h =
      s.router->Start(*std::move(p), std::make_shared<NullObserver>());
  return h.ok() && (*h)->cache_status() == want;
}

void BM_RouterSemanticHit(benchmark::State& state) {
  Setup& s = Get();
  if (SkipIfBroken(state, s)) return;
  Timed(state, [&](size_t i) {
    return RouterHit(s, s.paraphrases[i % s.paraphrases.size()], CacheStatus::kHitSemantic);
  });
}

void BM_RouterExactHit(benchmark::State& state) {
  Setup& s = Get();
  if (SkipIfBroken(state, s)) return;
  Timed(state, [&](size_t i) {
    return RouterHit(s, s.cached[i % s.cached.size()], CacheStatus::kHitExact);
  });
}

// The parts: one embedding; one HNSW search + guard with the embedding given.
void BM_EmbedQuery(benchmark::State& state) {
  Setup& s = Get();
  if (SkipIfBroken(state, s)) return;
  Timed(state, [&](size_t i) {
    return s.embedder->Embed(s.paraphrases[i % s.paraphrases.size()]).ok();
  });
}

void BM_SearchAndGuard(benchmark::State& state) {
  Setup& s = Get();
  if (SkipIfBroken(state, s)) return;
  std::vector<CacheRequest> reqs;
  for (const std::string& b : s.paraphrases) {
    reqs.push_back(s.router->Prepare(Chat(b), absl::InfiniteFuture())->cache);
  }
  Timed(state, [&](size_t i) {
    const size_t k = i % reqs.size();
    return s.router->semantic_cache()->LookupSemantic(reqs[k], s.paraphrase_embeddings[k])
        .has_value();
  });
}

BENCHMARK(BM_RouterSemanticHit)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_RouterExactHit)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_EmbedQuery)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_SearchAndGuard)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace tandem::router

BENCHMARK_MAIN();
