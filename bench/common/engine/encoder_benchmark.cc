// engine::Encoder on all-MiniLM-L6-v2 (F32 GGUF from scripts/fetch_models.sh --minilm;
// skipped naming that command when missing): the latency of embedding one prompt of 50
// tokens (and, on the BF16 paths, of 8 to 128 tokens) and a batch of 16 such prompts, at 1 and 2 threads, F32 (gemm:0) and
// EncoderPrecision::kBf16 on AVX512-BF16 (gemm:1, where the CPU has it) and on AMX tiles
// (gemm:2, where the CPU has AMX-BF16; the default BF16 path there). The ids are fixed pseudo-random
// word pieces between [CLS] and [SEP] (the cost depends only on the length).
//
//   build/bin/encoder_benchmark --benchmark_repetitions=3 --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <memory>
#include <vector>

#include "common/engine/encoder.h"
#include "common/engine/encoder_ops/gemm_bf16.h"
#include "common/engine/model_store.h"

namespace tandem::engine {
namespace {

void BM_Embed(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int threads = static_cast<int>(state.range(1));
  const int tokens = static_cast<int>(state.range(3));
  const int64_t gemm = state.range(2);
  const auto precision = gemm > 0 ? EncoderPrecision::kBf16 : EncoderPrecision::kF32;
  auto path = ResolveModelPath("all-minilm-l6-v2");
  if (!path.ok()) {
    state.SkipWithError(std::string(path.status().message()).c_str());
    return;
  }
  auto encoder = Encoder::Load(*path, threads, precision);
  if (!encoder.ok()) {
    state.SkipWithError(std::string(encoder.status().message()).c_str());
    return;
  }
  if ((*encoder)->precision() != precision) {
    state.SkipWithError("no AVX512-BF16 on this CPU");
    return;
  }
  encoder_ops::SetAmxEnabled(gemm == 2);
  if (gemm == 2 && !encoder_ops::AmxSupported()) {
    encoder_ops::SetAmxEnabled(true);
    state.SkipWithError("no AMX-BF16 on this CPU");
    return;
  }
  state.SetLabel(gemm == 0 ? "f32" : gemm == 1 ? "bf16 avx512-bf16" : "bf16 amx");
  std::vector<std::vector<TokenId>> ids(batch);
  uint32_t seed = 1;
  for (std::vector<TokenId>& seq : ids) {
    seq.push_back(101);  // [CLS]
    for (int i = 0; i < tokens - 2; ++i) {
      seed = seed * 1664525u + 1013904223u;
      seq.push_back(static_cast<TokenId>(1996 + (seed >> 8) % 20000));
    }
    seq.push_back(102);  // [SEP]
  }
  for (auto _ : state) {
    auto out = (*encoder)->Embed(ids);
    benchmark::DoNotOptimize(out);
  }
  state.counters["tokens/s"] = benchmark::Counter(static_cast<double>(batch) * tokens,
                                                  benchmark::Counter::kIsIterationInvariantRate);
  encoder_ops::SetAmxEnabled(true);
}
BENCHMARK(BM_Embed)
    ->ArgNames({"batch", "threads", "gemm", "tokens"})
    ->ArgsProduct({{1, 16}, {1, 2}, {0, 1, 2}, {50}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
// One prompt by length, on the BF16 paths: what a prompt costs whatever its length (the
// weights streamed once per layer) and per token.
BENCHMARK(BM_Embed)
    ->ArgNames({"batch", "threads", "gemm", "tokens"})
    ->ArgsProduct({{1}, {1}, {1, 2}, {8, 16, 32, 64, 128}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace tandem::engine

BENCHMARK_MAIN();
