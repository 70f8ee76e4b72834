// Engine benchmarks on a TinyLlama-1.1B-shaped random model (dim 2048, 22
// layers, 32 heads, 4 KV heads, ffn 5632, Llama-2 32000 vocab) in F16, Q8_0,
// Q4_0 and Q4_K_M (type 3: the F16 model through tandem-quantize's Q4_K_M
// recipe): decode tokens/s at batch 1/4/8/32 and prefill tokens/s for a
// 512-token chunk, at 1 and 2 threads. Every result also reports its bound:
//   decode:  bytes of weights read per step / measured read bandwidth
//   prefill: 2 * weights * tokens ops / this machine's assumed peak
//            (PeakGops below) and the measured ops/s.
//
// Models are generated once into build/bench-models/ (tandem-mkmodel logic).
// Types 4-6 are the real models from the model cache (kRealModels below;
// scripts/fetch_models.sh --qwen): their cases are skipped with the fetch
// command when the file is missing. Their decode cases sweep the batch size
// 1..128 to find the decode saturation point (where a step stops costing the
// same as at batch 1 and starts growing with the batch; docs/benchmarks.md).
// Only them:
//   build/bin/engine_benchmark --benchmark_filter='type:[456]/'
//
//   build/bin/engine_benchmark --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
//
// TANDEM_REPACK=0 in the environment loads the models without the load-time
// repacked weights (engine::SetLoadTimeRepack(false); tandem-generate
// --norepack), for side-by-side comparisons. --isa=NAME runs the kernels on
// that path (isa_flag.h; e.g. --isa=avx512vnni against the default
// avx512amx), --prefetch=l1|l2 sets where the decode kernels prefetch
// (engine::SetStreamPrefetch; e.g. --prefetch=l1 against Intel's default l2).

#include <benchmark/benchmark.h>
#include <time.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <map>
#include <memory>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "bench/common/engine/isa_flag.h"
#include "bench/common/engine/read_probe.h"
#include "common/base/thread_pool.h"
#include "common/engine/engine.h"
#include "common/engine/format/gguf.h"
#include "common/engine/kernels/kernels.h"
#include "common/engine/model.h"
#include "common/engine/model_builder.h"
#include "common/engine/model_store.h"

namespace tandem::engine {
namespace {

// The real models (types 4-6), as shipped, resolved through the model store.
struct RealModel {
  int type;
  const char* label;
  const char* store_name;  // engine::ResolveModelPath's name
};
constexpr RealModel kRealModels[] = {
    {4, "Qwen2.5-Coder-1.5B Q4_K_M", "qwen2.5-coder-1.5b-instruct"},
    {5, "SmolLM2-135M Q4_1", "smollm2-135m-instruct"},
    {6, "Qwen2.5-Coder-0.5B Q4_K_M", "qwen2.5-coder-0.5b-instruct"},
};
const RealModel* RealModelOf(int t) {
  for (const RealModel& m : kRealModels) {
    if (m.type == t) return &m;
  }
  return nullptr;
}

const char* TypeName(int t) {
  if (const RealModel* real = RealModelOf(t)) return real->label;
  switch (t) {
    case 0: return "F16";
    case 1: return "Q8_0";
    case 2: return "Q4_0";
    default: return "Q4_K_M";
  }
}
// The type of most weights (Q4_K_M: Q4_K, with some Q6_K; the real models are
// all quantized, which is all PeakGops asks).
engine::GgmlType TypeOf(int t) {
  switch (t) {
    case 0: return engine::GgmlType::kF16;
    case 1: return engine::GgmlType::kQ8_0;
    case 2: return engine::GgmlType::kQ4_0;
    default: return engine::GgmlType::kQ4_K;
  }
}

// False (the case skipped, naming the fetch command) when type `t` is a
// real model and it is not in the cache.
bool Available(int t, benchmark::State& state) {
  const RealModel* real = RealModelOf(t);
  if (real == nullptr) return true;
  absl::StatusOr<std::string> path = engine::ResolveModelPath(real->store_name);
  if (path.ok()) return true;
  state.SkipWithError(std::string(path.status().message()).c_str());
  return false;
}

const engine::Model& TinyLlama(int t) {
  static auto* models = new std::map<int, std::unique_ptr<engine::Model>>();
  static const bool repack = [] {
    const char* env = std::getenv("TANDEM_REPACK");
    const bool on = env == nullptr || std::string(env) != "0";
    engine::SetLoadTimeRepack(on);
    return on;
  }();
  (void)repack;
  auto it = models->find(t);
  if (it != models->end()) return *it->second;
  if (const RealModel* real = RealModelOf(t)) {  // the real model: its file as shipped
    absl::StatusOr<std::string> path = engine::ResolveModelPath(real->store_name);
    absl::StatusOr<std::unique_ptr<engine::Model>> m =
        path.ok() ? engine::Model::Load(*path) : path.status();
    if (!m.ok()) {
      fprintf(stderr, "%s\n", m.status().ToString().c_str());
      std::exit(1);
    }
    return *((*models)[t] = *std::move(m));
  }
  const std::string dir = std::string(TANDEM_BINARY_DIR) + "/bench-models";
  std::filesystem::create_directories(dir);
  const std::string path = absl::StrCat(dir, "/tinyllama-shape-", TypeName(t), ".gguf");
  if (!std::filesystem::exists(path)) {
    engine::RandomModelSpec spec;
    spec.dim = 2048;
    spec.layers = 22;
    spec.heads = 32;
    spec.kv_heads = 4;
    spec.ffn = 5632;
    spec.context = 2048;
    spec.vocab_path = std::string(TANDEM_SHARED_DIR) + "/models/ggml-vocab/ggml-vocab-llama-spm.gguf";
    if (!std::filesystem::exists(spec.vocab_path)) {
      fprintf(stderr, "missing %s: check out ../shared next to the repository\n",
              spec.vocab_path.c_str());
      std::exit(1);
    }
    absl::Status s;
    if (t == 3) {
      // Q4_K_M: quantize the F16 model (written first if needed).
      TinyLlama(0);
      s = engine::QuantizeGgufFile(absl::StrCat(dir, "/tinyllama-shape-F16.gguf"), path + ".tmp",
                                   engine::QuantRecipe::kQ4_K_M);
    } else {
      spec.dtype = TypeOf(t);
      s = engine::WriteRandomModel(spec, path + ".tmp");
    }
    if (!s.ok()) {
      fprintf(stderr, "writing %s: %s\n", path.c_str(), s.ToString().c_str());
      std::exit(1);
    }
    std::filesystem::rename(path + ".tmp", path);
  }
  auto m = engine::Model::Load(path);
  if (!m.ok()) {
    fprintf(stderr, "%s\n", m.status().ToString().c_str());
    std::exit(1);
  }
  auto& slot = (*models)[t];
  slot = std::move(m).value();
  return *slot;
}

// Read bandwidth of this machine, bytes/s, measured with `threads` threads
// summing a 1 GiB buffer (read_probe.h): the best of 3 passes in each
// ProbeMode, each mode's best also in `by_mode` when given. The bound is the
// best mode.
double ReadBandwidth(int threads, std::array<double, bench::kProbeModes>* by_mode = nullptr) {
  static std::map<int, std::array<double, bench::kProbeModes>> cache;
  if (!cache.count(threads)) {
    constexpr size_t kBytes = size_t{1} << 30;
    constexpr size_t n = kBytes / sizeof(uint64_t);
    static const bench::HugePageWords words(kBytes);
    const uint64_t* buf = words.get();
    base::ThreadPool pool(threads);
    std::array<double, bench::kProbeModes> best{};
    std::atomic<uint64_t> sink{0};
    for (int rep = 0; rep < 3; ++rep) {
      for (int mode = 0; mode < bench::kProbeModes; ++mode) {
        auto start = std::chrono::steady_clock::now();
        pool.Run(threads * 16, [&](int64_t task, int) {
          const size_t chunk = n / (threads * 16);
          sink.fetch_add(
              bench::SumWords(buf + task * chunk, chunk, static_cast<bench::ProbeMode>(mode)),
              std::memory_order_relaxed);
        });
        double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
        best[mode] = std::max(best[mode], kBytes / s);
      }
    }
    benchmark::DoNotOptimize(sink.load());
    cache[threads] = best;
  }
  const std::array<double, bench::kProbeModes>& best = cache[threads];
  if (by_mode != nullptr) *by_mode = best;
  return *std::max_element(best.begin(), best.end());
}

void BM_MemoryReadBandwidth(benchmark::State& state) {
  const int threads = state.range(0);
  double bw = 0;
  std::array<double, bench::kProbeModes> by_mode{};
  for (auto _ : state) {
    bw = ReadBandwidth(threads, &by_mode);
  }
  state.counters["GB/s"] = bw / 1e9;
  for (int mode = 0; mode < bench::kProbeModes; ++mode) {
    state.counters[absl::StrCat(bench::kProbeModeNames[mode], " GB/s")] = by_mode[mode] / 1e9;
  }
}
BENCHMARK(BM_MemoryReadBandwidth)->ArgName("threads")->Arg(1)->Arg(2)->Iterations(1)
    ->Unit(benchmark::kMillisecond);

// Peak arithmetic throughput assumed for the prefill fraction, per core at
// ~3.0 GHz on this Zen 3-class CPU without AVX-512: int8 through AVX2
// vpmaddubsw (2 per cycle x 32 multiply-adds = 128 ops/cycle ~ 390 Gop/s),
// fp32 through FMA (2 per cycle x 8 lanes x 2 = 32 flops/cycle ~ 98 GFLOP/s).
// The issue quotes 1.1 Top/s on two cores for AVX-512 VNNI, which this
// machine lacks. Divide GOP/s by peak_GOP/s for the fraction.
double PeakGops(engine::GgmlType t, int threads) {
  const bool quantized = t != engine::GgmlType::kF16;
  return (quantized ? 390.0 : 98.0) * threads;
}

// CPU seconds this process has used (all threads): with the wall time it says
// how many cores a case really got on a shared machine.
double ProcessCpuSeconds() {
  timespec ts{};
  clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
  return ts.tv_sec + ts.tv_nsec * 1e-9;
}

// Multiply-adds per token in the matrix multiplies (attention scores
// excluded), with or without the lm head (vocab x dim).
double MatmulParams(const engine::ModelConfig& c, bool with_head) {
  const double layers = c.num_layers * (2.0 * c.dim * c.num_heads * c.head_dim +
                                        2.0 * c.dim * c.num_kv_heads * c.head_dim +
                                        3.0 * c.dim * c.ffn_dim);
  return layers + (with_head ? 1.0 * c.vocab_size * c.dim : 0.0);
}

std::unique_ptr<engine::Engine> MakeEngine(const engine::Model& m, int threads, int32_t blocks) {
  engine::EngineConfig c;
  c.num_threads = threads;
  c.num_kv_blocks = blocks;
  c.kv_dtype = engine::GgmlType::kF16;
  c.enable_prefix_cache = false;
  auto e = engine::Engine::Create(m, c);
  if (!e.ok()) {
    fprintf(stderr, "%s\n", e.status().ToString().c_str());
    std::exit(1);
  }
  // The decode cases import their context's KV without computing it. The
  // pool is an anonymous mapping: pages never written all read the kernel's
  // one shared zero page, which stays in L1/L2, so attention over such a
  // context costs what no real one does (BM_DecodeContext at 512 tokens read
  // 23.4 ms a step where tandem-generate's decode at that depth took 24.8).
  // Every page gets distinct data, as a transport's writes would give it:
  // F16 values of magnitude 1/4 to 1/2, either sign.
  auto* kv = static_cast<uint16_t*>((*e)->kv_pool_base());
  uint32_t x = 12345;
  for (int64_t i = 0; i < (*e)->kv_pool_bytes() / 2; ++i) {
    x = x * 1664525u + 1013904223u;
    kv[i] = static_cast<uint16_t>(((x >> 16) & 0x83ff) | 0x3400);
  }
  return std::move(e).value();
}

// Decode: `batch` sequences, each with a 128-token context, one token each per step.
void BM_Decode(benchmark::State& state) {
  const int type = state.range(0), batch = state.range(1), threads = state.range(2);
  if (!Available(type, state)) return;
  const engine::Model& model = TinyLlama(type);
  constexpr int kContext = 128, kMaxLen = 256;
  auto engine = MakeEngine(model, threads, batch * (kMaxLen / 16 + 1));
  std::vector<int32_t> prompt(kContext);
  for (int i = 0; i < kContext; ++i) prompt[i] = 100 + (i * 37) % 20000;
  // The context's KV is imported rather than computed (its values do not
  // change the decode step's cost; MakeEngine writes every page of the
  // pool), so large batches start in milliseconds.
  auto fill = [&] {
    for (int s = 0; s < batch; ++s) {
      if (!engine->AddSequenceForImport(s, prompt).ok() || !engine->CommitImport(s).ok()) {
        std::exit(1);
      }
    }
  };
  fill();
  std::vector<int32_t> tokens(batch, 42);
  std::vector<engine::BatchEntry> step(batch);
  for (int s = 0; s < batch; ++s) step[s] = {s, absl::MakeConstSpan(&tokens[s], 1), engine::LogitsMode::kLast};
  // One untimed step first: it pages the mapped weights in and sizes the
  // buffers, which cases with one or two timed steps (large batches of the
  // 1.5B) must not count.
  if (!engine->Step(step).ok()) std::exit(1);
  base::ThreadPool& pool = engine->pool();
  pool.set_busy_accounting(true);
  const int64_t busy_start = pool.busy_nanos();
  int64_t paused_busy = 0;
  auto start = std::chrono::steady_clock::now();
  const double cpu_start = ProcessCpuSeconds();
  double paused_s = 0, paused_cpu_s = 0;
  for (auto _ : state) {
    if (engine->SequenceLength(0) >= kMaxLen) {
      state.PauseTiming();
      auto p0 = std::chrono::steady_clock::now();
      const double cpu0 = ProcessCpuSeconds();
      const int64_t busy0 = pool.busy_nanos();
      for (int s = 0; s < batch; ++s) (void)engine->FreeSequence(s);
      fill();
      paused_busy += pool.busy_nanos() - busy0;
      paused_s += std::chrono::duration<double>(std::chrono::steady_clock::now() - p0).count();
      paused_cpu_s += ProcessCpuSeconds() - cpu0;
      state.ResumeTiming();
    }
    auto out = engine->Step(step);
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(out->last_logits(0).data());
  }
  const double elapsed =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() - paused_s;
  const double cpu = ProcessCpuSeconds() - cpu_start - paused_cpu_s;
  pool.set_busy_accounting(false);
  const double busy_s = (pool.busy_nanos() - busy_start - paused_busy) * 1e-9;
  const double steps = state.iterations();
  state.SetItemsProcessed(static_cast<int64_t>(steps * batch));
  const double bytes = model.weight_bytes_per_token();
  const double bw = ReadBandwidth(threads);
  state.counters["tok/s"] = benchmark::Counter(steps * batch, benchmark::Counter::kIsRate);
  // Each step reads all weights once: the bandwidth bound is bw / bytes steps/s.
  state.counters["weight_GB/s"] = steps * bytes / elapsed / 1e9;
  state.counters["bw_GB/s"] = bw / 1e9;
  state.counters["frac_of_bw_bound"] = steps * bytes / elapsed / bw;
  state.counters["weights_MB"] = bytes / 1e6;
  // Where the step's cost goes as the batch grows (the saturation sweep):
  // time and CPU time per step (CPU / wall < threads: the machine was busy),
  // the KV bytes attention reads per step (F16, mean context (kContext +
  // kMaxLen) / 2), the step's floor at the measured bandwidth for weights + KV,
  // and the arithmetic rate of the matrix multiplies.
  const engine::ModelConfig& c = model.config();
  const double kv_bytes = batch * (kContext + kMaxLen) / 2.0 * c.num_layers * 2.0 *
                          c.num_kv_heads * c.head_dim * sizeof(uint16_t);
  state.counters["ms/step"] = elapsed / steps * 1e3;
  state.counters["cpu_ms/step"] = cpu / steps * 1e3;
  state.counters["cores_used"] = cpu / elapsed;
  // The share of the pool's thread time (threads x wall) spent inside its jobs'
  // tasks (the matmuls, RoPE, attention); the rest is the step loop, what the
  // engine thread does outside jobs (norms, SwiGLU, the logits copy), hand-offs
  // and waiting for the slower thread at each job's end (base::ThreadPool busy
  // accounting).
  state.counters["in_kernels"] = busy_s / (threads * elapsed);
  state.counters["kv_MB/step"] = kv_bytes / 1e6;
  state.counters["bw_floor_ms"] = (bytes + kv_bytes) / bw * 1e3;
  state.counters["GOP/s"] = 2 * MatmulParams(c, true) * batch * steps / elapsed / 1e9;
  state.SetLabel(absl::StrCat(TypeName(type), " batch ", batch, " threads ", threads));
}

// The matrix multiplies of one batch-1 decode step alone: every layer's seven
// MatMuls and the output head, in the step's order, on a pool of `threads`
// (as the engine's), with nothing in between. Its time per iteration next to
// BM_Decode's batch-1 ms/step (same model, threads, run) is the share of a
// step spent in the kernels; the rest is the step loop, the thread pool's
// hand-offs between them, norms, RoPE, attention over 128-256 tokens and
// the logits copy.
void BM_DecodeMatMulsOnly(benchmark::State& state) {
  const int type = state.range(0), threads = state.range(1);
  if (!Available(type, state)) return;
  const engine::Model& model = TinyLlama(type);
  const engine::ModelConfig& c = model.config();
  base::ThreadPool pool(threads);
  const int64_t widest = std::max<int64_t>({c.dim, c.ffn_dim, c.num_heads * c.head_dim,
                                            c.vocab_size});
  std::vector<float> x(widest, 0.01f), y(widest);
  for (size_t i = 0; i < x.size(); ++i) x[i] = 0.01f * static_cast<float>(i % 97) - 0.4f;
  auto step = [&] {
    for (int l = 0; l < c.num_layers; ++l) {
      const engine::LayerWeights& w = model.layer(l);
      for (const engine::WeightMatrix* m :
           {&w.wq, &w.wk, &w.wv, &w.wo, &w.w_gate, &w.w_up, &w.w_down}) {
        engine::MatMul(*m, x.data(), 1, y.data(), pool);
      }
    }
    engine::MatMul(model.output(), x.data(), 1, y.data(), pool);
  };
  step();  // pages the weights in
  for (auto _ : state) {
    step();
    benchmark::DoNotOptimize(y.data());
  }
  // The reported time per iteration is the matmuls' time per step.
  state.SetLabel(absl::StrCat(TypeName(type), " matmuls of a batch-1 step, threads ", threads));
}
BENCHMARK(BM_DecodeMatMulsOnly)
    ->ArgNames({"type", "threads"})
    ->ArgsProduct({{0, 1, 2, 3, 4}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

// Decode at long context: one sequence holding `context` tokens (imported KV,
// as BM_Decode) decodes one token per step, 64 steps at most before the
// sequence is reset (so the context stays within 64 tokens of `context`).
// Attention's share of the step grows with the context: at 16k tokens the
// 1.5B reads ~470 MB of F16 KV per token next to ~1 GB of weights. Real
// models only (types 4-6); llama.cpp's curve: llama-bench -d CONTEXT -n 64
// (bench/peer/compare_engine.sh --context).
void BM_DecodeContext(benchmark::State& state) {
  const int type = state.range(0), context = state.range(1), threads = state.range(2);
  if (!Available(type, state)) return;
  const engine::Model& model = TinyLlama(type);
  constexpr int kSteps = 64;
  auto engine = MakeEngine(model, threads, (context + kSteps) / 16 + 2);
  std::vector<int32_t> prompt(context);
  for (int i = 0; i < context; ++i) prompt[i] = 100 + (i * 37) % 20000;
  auto fill = [&] {
    if (!engine->AddSequenceForImport(0, prompt).ok() || !engine->CommitImport(0).ok()) {
      std::exit(1);
    }
  };
  fill();
  const int32_t token = 42;
  const engine::BatchEntry step{0, absl::MakeConstSpan(&token, 1), engine::LogitsMode::kLast};
  if (!engine->Step(absl::MakeConstSpan(&step, 1)).ok()) std::exit(1);
  double elapsed = 0;
  for (auto _ : state) {
    if (engine->SequenceLength(0) >= context + kSteps) {
      state.PauseTiming();
      (void)engine->FreeSequence(0);
      fill();
      state.ResumeTiming();
    }
    auto t0 = std::chrono::steady_clock::now();
    auto out = engine->Step(absl::MakeConstSpan(&step, 1));
    const double dt = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    state.SetIterationTime(dt);
    elapsed += dt;
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
    benchmark::DoNotOptimize(out->last_logits(0).data());
  }
  const engine::ModelConfig& c = model.config();
  const double kv_bytes =
      (context + kSteps / 2.0) * c.num_layers * 2.0 * c.num_kv_heads * c.head_dim * sizeof(uint16_t);
  const double bytes = model.weight_bytes_per_token() + kv_bytes;
  const double steps = state.iterations();
  state.counters["tok/s"] = steps / elapsed;
  state.counters["kv_MB/step"] = kv_bytes / 1e6;
  state.counters["frac_of_bw_bound"] = steps * bytes / elapsed / ReadBandwidth(threads);
  state.SetLabel(absl::StrCat(TypeName(type), " context ", context, " threads ", threads));
}

// Prefill: one 512-token chunk of a fresh sequence per iteration.
void BM_Prefill(benchmark::State& state) {
  const int type = state.range(0), threads = state.range(1);
  if (!Available(type, state)) return;
  const engine::Model& model = TinyLlama(type);
  constexpr int kChunk = 512;
  auto engine = MakeEngine(model, threads, kChunk / 16 + 2);
  std::vector<int32_t> prompt(kChunk);
  for (int i = 0; i < kChunk; ++i) prompt[i] = 100 + (i * 37) % 20000;
  double elapsed = 0;
  for (auto _ : state) {
    state.PauseTiming();
    (void)engine->FreeSequence(1);
    if (!engine->AddSequence(1, prompt).ok()) std::exit(1);
    state.ResumeTiming();
    auto t0 = std::chrono::steady_clock::now();
    engine::BatchEntry e{1, prompt, engine::LogitsMode::kLast};
    auto out = engine->Step(absl::MakeConstSpan(&e, 1));
    elapsed += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (!out.ok()) {
      state.SkipWithError(out.status().ToString().c_str());
      break;
    }
  }
  const double tokens = state.iterations() * kChunk;
  // Matmul work: 2 ops per weight per token (the lm head runs for the last token only).
  const double params = MatmulParams(model.config(), false);
  state.SetItemsProcessed(static_cast<int64_t>(tokens));
  state.counters["tok/s"] = benchmark::Counter(tokens, benchmark::Counter::kIsRate);
  state.counters["GOP/s"] = benchmark::Counter(tokens * 2 * params / 1e9, benchmark::Counter::kIsRate);
  state.counters["peak_GOP/s"] = PeakGops(TypeOf(type), threads);
  state.counters["frac_of_peak"] = tokens * 2 * params / 1e9 / elapsed / PeakGops(TypeOf(type), threads);
  state.SetLabel(absl::StrCat(TypeName(type), " chunk 512 threads ", threads));
}

BENCHMARK(BM_Decode)
    ->ArgNames({"type", "batch", "threads"})
    ->ArgsProduct({{0, 1, 2, 3}, {1, 4, 8, 32}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK(BM_Prefill)
    ->ArgNames({"type", "threads"})
    ->ArgsProduct({{0, 1, 2, 3}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
// The real models: the decode saturation sweep (batch 1..128; SmolLM2-135M,
// Qwen2.5-Coder-0.5B, -1.5B), and prefill for the 1.5B.
BENCHMARK(BM_Decode)
    ->ArgNames({"type", "batch", "threads"})
    ->ArgsProduct({{5, 6, 4}, {1, 2, 4, 8, 16, 32, 64, 128}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK(BM_DecodeContext)
    ->ArgNames({"type", "context", "threads"})
    ->ArgsProduct({{4, 6}, {512, 4096, 16384}, {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
// The TinyLlama-shape files at the depth compare_engine.sh's tg128 runs at
// (512 prompt tokens, then 128 decoded: context 512-576 here).
BENCHMARK(BM_DecodeContext)
    ->ArgNames({"type", "context", "threads"})
    ->ArgsProduct({{0, 1, 2, 3}, {512}, {1, 2}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);
BENCHMARK(BM_Prefill)
    ->ArgNames({"type", "threads"})
    ->ArgsProduct({{4}, {1, 2}})
    ->UseRealTime()
    ->Unit(benchmark::kMillisecond)
    ->MinTime(2.0);

}  // namespace
}  // namespace tandem::engine

int main(int argc, char** argv) {
  return tandem::engine::bench::BenchmarkMainWithIsaFlag("engine_benchmark", argc, argv);
}
