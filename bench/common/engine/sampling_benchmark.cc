// Cost of one Sampler::Sample call per generated token, greedy vs sampled, at
// the vocabulary sizes of the real models (SmolLM2 49,152; Qwen2.5 151,936):
// what a client that leaves OpenAI's default temperature (1.0) costs the
// server per token over a greedy one.
//
//   build/bin/sampling_benchmark --benchmark_min_time=0.5
//
// Arguments: vocab size, mode (0 greedy, 1 temperature 1, 2 temperature 1 +
// top_p 0.9, 3 greedy + logprobs). Logits: a fixed pseudo-random draw, N(0, 3).

#include <cstdint>
#include <random>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/engine/sampling.h"

namespace tandem::engine {
namespace {

void BM_Sample(benchmark::State& state) {
  const int64_t vocab = state.range(0);
  const int64_t mode = state.range(1);
  std::vector<float> logits(vocab);
  std::mt19937_64 rng(7);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  for (float& x : logits) x = normal(rng);
  SamplingParams params;
  params.temperature = (mode == 1 || mode == 2) ? 1.0f : 0.0f;
  params.top_p = mode == 2 ? 0.9f : 1.0f;
  params.logprobs = mode == 3;
  Sampler sampler(params);
  const std::vector<int32_t> history;
  for (auto _ : state) {
    SampleResult r = sampler.Sample(logits, history);
    benchmark::DoNotOptimize(r);
  }
  static const char* const kNames[] = {"greedy", "temperature 1", "temperature 1 top_p 0.9",
                                       "greedy + logprobs"};
  state.SetLabel(kNames[mode]);
}
BENCHMARK(BM_Sample)
    ->ArgsProduct({{49152, 151936}, {0, 1, 2, 3}})
    ->MeasureProcessCPUTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tandem::engine

BENCHMARK_MAIN();
