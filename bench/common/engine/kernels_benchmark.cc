// Kernel micro-benchmarks on TinyLlama-1.1B shapes (hidden 2048, ffn 5632,
// vocab 32000, 32 heads / 4 KV heads of 64).
//
//   BM_MatMul_<type>/m/shape/threads   shape: 0 = 2048x2048 (attn), 1 = 5632x2048
//                                      (ffn gate/up), 2 = 2048x5632 (ffn down),
//                                      3 = 32000x2048 (lm head); rows x cols.
//   BM_MemoryBandwidth/threads         read bandwidth (1 GiB in huge pages, AVX2 loads)
//   BM_FmaPeak/threads                 fp32 FMA peak (the float GEMMs' compute bound)
//   BM_PagedAttention/batch/ctx/dtype/threads
//   BM_ThreadPoolJob/threads/tasks     fork/join overhead of one job
//
// Counters: bytes_per_second (weights or KV read per iteration), "ops" (2
// ops per multiply-add, per second), "tok/s" (activation rows per second).
// Each MatMul benchmark cycles over enough copies of the weights (>= 256 MiB)
// that batch 1 reads them from DRAM, as decoding a real model does, rather
// than from the L3 cache.

#include <immintrin.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <memory>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include "bench/common/engine/isa_flag.h"
#include "bench/common/engine/read_probe.h"
#include "benchmark/benchmark.h"
#include "common/base/thread_pool.h"
#include "common/engine/format/ggml_type.h"
#include "common/engine/kernels/kernels.h"

namespace tandem::engine {
namespace {

struct Shape {
  int64_t rows;
  int64_t cols;
};
constexpr Shape kShapes[] = {{2048, 2048}, {5632, 2048}, {2048, 5632}, {32000, 2048}};
constexpr int64_t kMinWeightBytes = int64_t{256} << 20;

// Cheap deterministic floats in [-1, 1) (normal generation of 65M values
// would dominate set-up time).
void FillUniform(float* p, int64_t n, uint64_t seed) {
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 1;
  for (int64_t i = 0; i < n; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    p[i] = static_cast<float>(static_cast<int32_t>(s >> 32)) * (1.0f / 2147483648.0f);
  }
}

bool IsKQuant(engine::GgmlType t) {
  return t == engine::GgmlType::kQ4_K || t == engine::GgmlType::kQ5_K ||
         t == engine::GgmlType::kQ6_K;
}

// A K-quant row (no K-quant quantizer yet): random levels and scales, fp16
// d / dmin small and finite. The kernels' work does not depend on the values.
void FillKQuantRow(engine::GgmlType type, uint8_t* row, int64_t cols, uint64_t seed) {
  const int64_t bytes = engine::GgmlTypeSize(type);
  uint64_t s = seed * 0x9E3779B97F4A7C15ull + 7;
  for (int64_t i = 0; i < cols / engine::kQK_K * bytes; ++i) {
    s = s * 6364136223846793005ull + 1442695040888963407ull;
    row[i] = static_cast<uint8_t>(s >> 56);
  }
  const uint16_t small = engine::Fp32ToFp16(1e-3f);
  for (int64_t b = 0; b < cols / engine::kQK_K; ++b) {
    uint8_t* blk = row + b * bytes;
    if (type == engine::GgmlType::kQ6_K) {
      std::memcpy(blk + offsetof(engine::BlockQ6_K, d), &small, 2);
    } else {
      std::memcpy(blk, &small, 2);
      std::memcpy(blk + 2, &small, 2);
    }
  }
}

void BM_MatMul(benchmark::State& state, engine::GgmlType type) {
  const int64_t m = state.range(0);
  const Shape shape = kShapes[state.range(1)];
  const int threads = static_cast<int>(state.range(2));
  const int64_t row_bytes = engine::GgmlRowBytes(type, shape.cols);
  const int64_t bytes = row_bytes * shape.rows;
  const int64_t copies = std::max<int64_t>(1, (kMinWeightBytes + bytes - 1) / bytes);
  // One copy quantized from floats, the others memcpy'd from it.
  std::vector<uint8_t> data(bytes * copies);
  {
    std::vector<float> row(shape.cols);
    for (int64_t r = 0; r < shape.rows; ++r) {
      if (IsKQuant(type)) {
        FillKQuantRow(type, data.data() + r * row_bytes, shape.cols, r);
        continue;
      }
      FillUniform(row.data(), shape.cols, r);
      engine::QuantizeRow(type, row.data(), data.data() + r * row_bytes, shape.cols);
    }
    for (int64_t c = 1; c < copies; ++c) {
      std::memcpy(data.data() + c * bytes, data.data(), bytes);
    }
  }
  std::vector<engine::WeightMatrix> weights;
  for (int64_t c = 0; c < copies; ++c) {
    weights.push_back(
        engine::WeightMatrix::Create(type, data.data() + c * bytes, shape.rows, shape.cols).value());
  }
  std::vector<float> x(m * shape.cols);
  FillUniform(x.data(), m * shape.cols, 12345);
  std::vector<float> y(m * shape.rows);
  base::ThreadPool pool(threads);
  int64_t next = 0;
  for (auto _ : state) {
    engine::MatMul(weights[next], x.data(), m, y.data(), pool);
    benchmark::DoNotOptimize(y.data());
    benchmark::ClobberMemory();
    next = (next + 1) % copies;
  }
  state.SetBytesProcessed(state.iterations() * bytes);
  state.counters["ops"] = benchmark::Counter(2.0 * m * shape.rows * shape.cols,
                                             benchmark::Counter::kIsIterationInvariantRate);
  state.counters["tok/s"] =
      benchmark::Counter(static_cast<double>(m), benchmark::Counter::kIsIterationInvariantRate);
  state.SetLabel(std::string(engine::IsaName(engine::ActiveIsa())) + " prefetch " +
                 engine::StreamPrefetchName(engine::ActiveStreamPrefetch()));
}

void MatMulArgs(benchmark::internal::Benchmark* b) {
  for (int64_t threads : {1, 2}) {
    for (int64_t shape = 0; shape < 4; ++shape) {
      for (int64_t m : {1, 8, 16, 32, 512}) {
        b->Args({m, shape, threads});
      }
    }
  }
  b->ArgNames({"m", "shape", "threads"})->Unit(benchmark::kMillisecond)->UseRealTime();
}

void BM_MatMul_F32(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kF32); }
void BM_MatMul_F16(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kF16); }
void BM_MatMul_BF16(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kBF16); }
void BM_MatMul_Q8_0(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kQ8_0); }
void BM_MatMul_Q4_0(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kQ4_0); }
void BM_MatMul_Q4_1(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kQ4_1); }
void BM_MatMul_Q5_0(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kQ5_0); }
void BM_MatMul_Q5_1(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kQ5_1); }
void BM_MatMul_Q4_K(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kQ4_K); }
void BM_MatMul_Q5_K(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kQ5_K); }
void BM_MatMul_Q6_K(benchmark::State& s) { BM_MatMul(s, engine::GgmlType::kQ6_K); }
BENCHMARK(BM_MatMul_F32)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_F16)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_BF16)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_Q8_0)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_Q4_0)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_Q4_1)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_Q5_0)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_Q5_1)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_Q4_K)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_Q5_K)->Apply(MatMulArgs);
BENCHMARK(BM_MatMul_Q6_K)->Apply(MatMulArgs);

// Plain AVX2 loads over huge pages (read_probe.h; engine_benchmark's
// BM_MemoryReadBandwidth also tries the prefetching modes and takes the best).
void BM_MemoryBandwidth(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  constexpr int64_t kBytes = int64_t{1} << 30;
  constexpr int64_t kWords = kBytes / 8;
  constexpr int64_t kChunks = 256;  // 4 MiB tasks, handed out dynamically
  const bench::HugePageWords buf(kBytes);
  base::ThreadPool pool(threads);
  std::vector<uint64_t> partial(kChunks);
  for (auto _ : state) {
    pool.Run(kChunks, [&](int64_t task, int) {
      partial[task] = bench::SumWords(buf.get() + task * (kWords / kChunks), kWords / kChunks,
                                      bench::ProbeMode::kPlain);
    });
    benchmark::DoNotOptimize(partial.data());
  }
  state.SetBytesProcessed(state.iterations() * kBytes);
}
BENCHMARK(BM_MemoryBandwidth)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Peak fp32 multiply-add rate, the compute bound of the float GEMMs (F16 and
// BF16 weights multiply in fp32: prefill and batched decode of those files).
// Independent chains of vfmadd231ps on registers, no memory traffic: 16 chains
// of 512 bits on the AVX-512 ISAs, 12 of 256 bits on AVX2 (enough to cover a
// 4-5 cycle latency on two FMA pipes). "flop/s" counts 2 per lane per FMA.
constexpr int64_t kFmaSteps = int64_t{1} << 20;  // per task, each an FMA on every chain

__attribute__((target("avx512f"))) float FmaChains512(float seed) {
  __m512 a[16];
  for (int j = 0; j < 16; ++j) a[j] = _mm512_set1_ps(seed + 0.001f * static_cast<float>(j));
  const __m512 m = _mm512_set1_ps(0.9999999f), c = _mm512_set1_ps(1e-7f);
  for (int64_t i = 0; i < kFmaSteps; ++i) {
    for (int j = 0; j < 16; ++j) a[j] = _mm512_fmadd_ps(a[j], m, c);
  }
  __m512 s = a[0];
  for (int j = 1; j < 16; ++j) s = _mm512_add_ps(s, a[j]);
  alignas(64) float t[16];  // not _mm512_reduce_add_ps: GCC 12 warns inside it
  _mm512_store_ps(t, s);
  float sum = 0.0f;
  for (float v : t) sum += v;
  return sum;
}

__attribute__((target("avx2,fma"))) float FmaChains256(float seed) {
  __m256 a[12];
  for (int j = 0; j < 12; ++j) a[j] = _mm256_set1_ps(seed + 0.001f * static_cast<float>(j));
  const __m256 m = _mm256_set1_ps(0.9999999f), c = _mm256_set1_ps(1e-7f);
  for (int64_t i = 0; i < kFmaSteps; ++i) {
    for (int j = 0; j < 12; ++j) a[j] = _mm256_fmadd_ps(a[j], m, c);
  }
  __m256 s = a[0];
  for (int j = 1; j < 12; ++j) s = _mm256_add_ps(s, a[j]);
  alignas(32) float t[8];
  _mm256_store_ps(t, s);
  float sum = 0.0f;
  for (float v : t) sum += v;
  return sum;
}

void BM_FmaPeak(benchmark::State& state) {
  const int threads = static_cast<int>(state.range(0));
  const bool wide = ActiveIsa() >= Isa::kAvx512;
  if (ActiveIsa() < Isa::kAvx2) {
    state.SkipWithError("needs AVX2 + FMA");
    return;
  }
  const int64_t tasks = 4 * threads;
  base::ThreadPool pool(threads);
  std::vector<float> sink(tasks);
  for (auto _ : state) {
    pool.Run(tasks, [&](int64_t task, int) {
      const float seed = 1.0f + 0.01f * static_cast<float>(task);
      sink[task] = wide ? FmaChains512(seed) : FmaChains256(seed);
    });
    benchmark::DoNotOptimize(sink.data());
  }
  const double flops_per_task = static_cast<double>(kFmaSteps) * (wide ? 16 * 16 : 12 * 8) * 2;
  state.counters["flop/s"] = benchmark::Counter(
      flops_per_task * static_cast<double>(tasks) * static_cast<double>(state.iterations()),
      benchmark::Counter::kIsRate);
  state.SetLabel(wide ? "zmm" : "ymm");
}
BENCHMARK(BM_FmaPeak)
    ->ArgName("threads")
    ->Arg(1)
    ->Arg(2)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

// Fork/join cost of one ThreadPool job of `tasks` empty tasks (a decode step
// issues ~150 jobs, so this must stay in the low microseconds).
void BM_ThreadPoolJob(benchmark::State& state) {
  base::ThreadPool pool(static_cast<int>(state.range(0)));
  const int64_t tasks = state.range(1);
  std::vector<int64_t> sink(tasks);
  for (auto _ : state) {
    pool.Run(tasks, [&](int64_t task, int thread) { sink[task] = thread; });
    benchmark::DoNotOptimize(sink.data());
  }
}
BENCHMARK(BM_ThreadPoolJob)
    ->ArgNames({"threads", "tasks"})
    ->ArgsProduct({{1, 2}, {2, 16}})
    ->UseRealTime();

// Decode-style attention: `batch` sequences of `ctx` tokens each, one query
// token per sequence at the last position, TinyLlama head layout.
void BM_PagedAttention(benchmark::State& state) {
  const int batch = static_cast<int>(state.range(0));
  const int ctx = static_cast<int>(state.range(1));
  const engine::GgmlType dtype = state.range(2) == 16 ? engine::GgmlType::kF16 : engine::GgmlType::kF32;
  const int threads = static_cast<int>(state.range(3));
  constexpr int kHeads = 32, kKvHeads = 4, kHeadDim = 64, kBlock = 16;
  const int blocks_per_seq = (ctx + kBlock - 1) / kBlock;
  const int num_blocks = batch * blocks_per_seq;
  const int64_t elt = dtype == engine::GgmlType::kF16 ? 2 : 4;
  const int64_t pool_elems = int64_t{num_blocks} * kKvHeads * kBlock * kHeadDim;
  std::vector<uint8_t> kpool(pool_elems * elt), vpool(pool_elems * elt);
  engine::PagedKv kv;
  kv.k = kpool.data();
  kv.v = vpool.data();
  kv.dtype = dtype;
  kv.block_size = kBlock;
  kv.n_kv_heads = kKvHeads;
  kv.head_dim = kHeadDim;
  // Shuffled block ids so sequences are not contiguous in the pool.
  std::vector<int32_t> ids(num_blocks);
  for (int i = 0; i < num_blocks; ++i) {
    ids[i] = i;
  }
  std::shuffle(ids.begin(), ids.end(), std::mt19937(7));
  std::vector<float> kvrow(kKvHeads * kHeadDim);
  for (int b = 0; b < num_blocks; ++b) {
    for (int s = 0; s < kBlock; ++s) {
      FillUniform(kvrow.data(), kvrow.size(), b * kBlock + s);
      engine::WriteKv(kv, b, s, kvrow.data(), kvrow.data());
    }
  }
  std::vector<const int32_t*> tables(batch);
  std::vector<int32_t> positions(batch, ctx - 1);
  for (int s = 0; s < batch; ++s) {
    tables[s] = ids.data() + s * blocks_per_seq;
  }
  std::vector<float> q(int64_t{batch} * kHeads * kHeadDim);
  FillUniform(q.data(), q.size(), 99);
  std::vector<float> out(q.size());
  base::ThreadPool pool(threads);
  for (auto _ : state) {
    engine::PagedAttention(q.data(), batch, positions.data(), tables.data(), kv, kHeads, 0.125f, out.data(),
                   pool);
    benchmark::DoNotOptimize(out.data());
  }
  state.SetBytesProcessed(state.iterations() * 2 * int64_t{batch} * ctx * kKvHeads * kHeadDim *
                          elt);
  state.counters["tok/s"] =
      benchmark::Counter(batch, benchmark::Counter::kIsIterationInvariantRate);
}
BENCHMARK(BM_PagedAttention)
    ->ArgNames({"batch", "ctx", "dtype", "threads"})
    ->ArgsProduct({{1, 32}, {512, 2048}, {32, 16}, {1, 2}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();

}  // namespace
}  // namespace tandem::engine

// --isa=NAME runs the kernels on that path (see isa_flag.h); the label of each
// MatMul row names the path that ran. Other flags go to Google Benchmark.
int main(int argc, char** argv) {
  return tandem::engine::bench::BenchmarkMainWithIsaFlag("kernels_benchmark", argc, argv);
}
