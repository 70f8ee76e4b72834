// engine::Encoder on all-MiniLM-L6-v2 (F32 GGUF from scripts/fetch_models.sh --minilm;
// skipped naming that command when missing): the latency of embedding one prompt of 50
// tokens (and, on the BF16 paths, of 8 to 128 tokens) and a batch of 16 such prompts, at 1 and 2 threads, F32 (gemm:0) and
// EncoderPrecision::kBf16 on AVX512-BF16 (gemm:1, where the CPU has it) and on AMX tiles
// (gemm:2, where the CPU has AMX-BF16; the default BF16 path there). The ids are fixed pseudo-random
// word pieces between [CLS] and [SEP] (the cost depends only on the length). BM_GemmBf16: one
// BF16 GEMM of MiniLM's FFN shapes alone (below).
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

// The BF16 GEMM's path for `gemm` (1 AVX512-BF16, 2 AMX; 0 leaves it); false (the state
// skipped) where the CPU lacks AMX. The caller turns AMX back on at the end.
bool SelectBf16Path(int64_t gemm, benchmark::State& state) {
  encoder_ops::SetAmxEnabled(gemm == 2);
  if (gemm == 2 && !encoder_ops::AmxSupported()) {
    encoder_ops::SetAmxEnabled(true);
    state.SkipWithError("no AMX-BF16 on this CPU");
    return false;
  }
  return true;
}

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
  if (!SelectBf16Path(gemm, state)) return;
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

// One BF16 GEMM alone (gemm:1 AVX512-BF16, gemm:2 AMX): m activation rows against a
// weight of MiniLM's FFN shapes (rows x cols = 1536 x 384 up, 384 x 1536 down; 1.2 MB of
// bf16). copies:1 uses one weight (L2-resident after the first iteration: the kernel's
// compute rate alone); copies:32 cycles through 32 of them (38 MB, more than a core's
// share of L3 on the machines measured: each call streams its weight from memory, as the
// encoder's 36 weights of 21 MB do).
void BM_GemmBf16(benchmark::State& state) {
  const int64_t m = state.range(0);
  const int64_t rows = state.range(1);
  const int64_t cols = state.range(2);
  const int64_t gemm = state.range(3);
  const int copies = static_cast<int>(state.range(4));
  if (!encoder_ops::Bf16Supported()) {
    state.SkipWithError("no AVX512-BF16 on this CPU");
    return;
  }
  if (!SelectBf16Path(gemm, state)) return;
  std::vector<float> w(rows * cols), bias(rows), x(m * cols), y(m * rows);
  uint32_t seed = 7;
  auto next = [&seed] {
    seed = seed * 1664525u + 1013904223u;
    return static_cast<float>(seed >> 8) / 16777216.0f - 0.5f;
  };
  for (float& v : w) v = next();
  for (float& v : bias) v = next();
  for (float& v : x) v = next();
  const std::vector<encoder_ops::PackedBf16> packed(
      copies, encoder_ops::PackBf16(w.data(), bias.data(), rows, cols));
  std::vector<uint16_t> xb(m * cols);
  encoder_ops::ToBf16(x.data(), m * cols, xb.data());
  const int64_t panels = (rows + 15) / 16;
  int next_copy = 0;
  for (auto _ : state) {
    encoder_ops::GemmBf16Panels(xb.data(), m, packed[next_copy], 0, panels, y.data());
    benchmark::DoNotOptimize(y.data());
    next_copy = (next_copy + 1) % copies;
  }
  state.counters["GFLOP/s"] = benchmark::Counter(2.0 * m * rows * cols * 1e-9,
                                                 benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(gemm == 1 ? "avx512-bf16" : "amx");
  encoder_ops::SetAmxEnabled(true);
}
BENCHMARK(BM_GemmBf16)
    ->ArgNames({"m", "rows", "cols", "gemm", "copies"})
    ->ArgsProduct({{16, 32, 64}, {1536}, {384}, {1, 2}, {1, 32}})
    ->ArgsProduct({{16, 32, 64}, {384}, {1536}, {1, 2}, {1, 32}})
    ->Unit(benchmark::kMicrosecond);

}  // namespace
}  // namespace tandem::engine

BENCHMARK_MAIN();
