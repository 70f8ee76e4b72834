#pragma once
// CPU compute kernels with run-time ISA dispatch (AVX-512 with VNNI and
// AMX-INT8 tiles, AVX2+FMA+F16C, scalar). The scalar path is the readable
// reference; every SIMD path is tested against it. All functions are
// thread-compatible; parallel ones take the ThreadPool they run on.

#include <cstdint>
#include <memory>
#include <string>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/base/thread_pool.h"
#include "common/engine/format/ggml_type.h"

namespace tandem::engine {

// kAvx512Amx: AVX-512 VNNI plus AMX-INT8 tiles, which the quantized GEMMs use
// for their integer block dots (the VNNI paths' bits).
enum class Isa { kScalar = 0, kAvx2 = 1, kAvx512 = 2, kAvx512Vnni = 3, kAvx512Amx = 4 };

// Best ISA this CPU supports.
Isa DetectIsa();
// Whether the CPU has AMX tiles (CPUID AMX-TILE), the OS enables their state
// (XCR0) and Linux grants it to this process (arch_prctl; without the grant the
// first tile instruction faults). Asked once; the answer is cached.
bool AmxTileStateGranted();
// The ISA kernels dispatch to (initially DetectIsa()). Setting one the CPU
// lacks is clamped to the best supported one. For tests and tools comparing paths.
void SetActiveIsa(Isa isa);
Isa ActiveIsa();
const char* IsaName(Isa isa);

// Where the kernels streaming a load-time copy at decode-sized batches (the
// batch-1 GEMVs above all) send their software prefetches, a fixed distance
// ahead of the weight stream: kL2 (PREFETCHT1) on Intel CPUs, where a
// prefetch into L1 holds one of the core's few L1 fill buffers for a whole
// DRAM round trip and so capped one core's stream (kL2 measured 1.1-1.4x at
// batch 1 on a Xeon with AMX, docs/benchmarks.md); kL1 (PREFETCHT0) on other
// CPUs (tuned on AMD Zen 3 and Zen 5; Zen 4 and later may drop T1 / T2
// prefetches). Results never depend on it. Set: for benchmarks comparing.
enum class StreamPrefetch { kL1 = 0, kL2 = 1 };
StreamPrefetch DetectStreamPrefetch();
void SetStreamPrefetch(StreamPrefetch prefetch);
StreamPrefetch ActiveStreamPrefetch();
const char* StreamPrefetchName(StreamPrefetch prefetch);

// A weight matrix of `rows` output features by `cols` inputs, each row stored
// in `type` (F32, F16, BF16, Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K).
// Borrows `data` (which must outlive it) and, where the ISA active at
// creation has kernels for a load-time layout of the type, also owns a
// repacked copy (the AVX2 layouts, made under AVX2 and under the AVX-512
// ISAs, whose per-call paths they match bit for bit: Q4_0, Q8_0, Q4_1, Q5_0,
// Q5_1, Q4_K, Q5_K, Q6_K, F16, BF16; as many bytes as the GGUF data, Q4_K
// 2.8 % and Q5_K 2.3 % more). MatMul multiplies decode-sized batches (up to 16 rows; F16 / BF16
// up to 3, or 8 under AVX-512) with the copy while that ISA stays active,
// and larger batches, or any batch under another ISA, with the borrowed
// data; every path gives the same bits.
// `cols` must be a multiple of the type's block size.
class WeightMatrix {
 public:
  // `repack` false: never make the repacked copy (a matrix only read by
  // DequantizeRowTo, such as an untied token embedding).
  static absl::StatusOr<WeightMatrix> Create(GgmlType type, const void* data, int64_t rows,
                                             int64_t cols, bool repack = true);
  WeightMatrix() = default;
  WeightMatrix(WeightMatrix&&) = default;
  WeightMatrix& operator=(WeightMatrix&&) = default;

  GgmlType type() const { return type_; }
  int64_t rows() const { return rows_; }
  int64_t cols() const { return cols_; }
  // Bytes a full pass over the weights reads (for bandwidth accounting).
  int64_t bytes() const { return GgmlRowBytes(type_, cols_) * rows_; }
  // Row r as floats (for embedding lookups and tests).
  void DequantizeRowTo(int64_t r, float* out) const;
  // Whether a load-time repacked copy exists (see above), and its bytes.
  bool prepacked() const { return packed_ != nullptr; }
  int64_t prepacked_bytes() const { return packed_bytes_; }
  // Where the copy lies (in transparent huge pages, base::HugePageArena);
  // null without one.
  const uint8_t* prepacked_data() const { return packed_; }

 private:
  friend void MatMul(const WeightMatrix&, const float*, int64_t, float*, base::ThreadPool&);
  GgmlType type_ = GgmlType::kF32;
  int64_t rows_ = 0;
  int64_t cols_ = 0;
  const uint8_t* data_ = nullptr;          // row-major, GgmlRowBytes(type, cols) per row
  // The repacked copy, for packed_isa_ (shared only to be cheaply copyable).
  std::shared_ptr<uint8_t> owned_;
  const uint8_t* packed_ = nullptr;
  int64_t packed_bytes_ = 0;
  Isa packed_isa_ = Isa::kScalar;
  // Q8_0 with a copy and no quant equal to -128 (internal::Q8NoMinQuant).
  bool q8_no_min_ = false;
};

// Whether WeightMatrix::Create makes load-time repacked copies (default on;
// as llama.cpp's --no-repack, off trades decode speed for the memory of the
// copy). Applies to matrices created afterwards.
void SetLoadTimeRepack(bool enabled);
bool LoadTimeRepack();

// y[i][r] = sum_c x[i][c] * w[r][c] for i < m. x is [m][w.cols()] row-major,
// y is [m][w.rows()]. For quantized weights activations are quantized to 8
// bits per 32-block on the fly (as ggml's vec_dot_q*_0_q8_0; for Q4_1/Q5_1
// the block sum serves the min term as ggml's Q8_1 does; K-quants use the
// same 32-blocks, one per sub-block, rather than ggml's Q8_K 256-blocks).
// Batch 1 (bandwidth-bound) and large m (blocked GEMM, compute-bound) give
// the same bits for a row (batch invariance).
void MatMul(const WeightMatrix& w, const float* x, int64_t m, float* y, base::ThreadPool& pool);

// out[i] = x[i] / sqrt(mean(x^2) + eps) * weight, for each of `rows` rows of n.
void RmsNorm(const float* x, const float* weight, int64_t rows, int64_t n, float eps, float* out);

// Rotary embedding in place on `n_heads` heads of `head_dim` for one token at
// `position`. inv_freq has rot_dim/2 entries (llama3 scaling folded in);
// dims >= rot_dim are left alone. kNormal rotates adjacent pairs (2i, 2i+1)
// (GGUF llama layout); kNeox rotates (i, i + rot_dim/2) (qwen2).
enum class RopeStyle { kNormal, kNeox };
void Rope(float* x, int n_heads, int head_dim, int rot_dim, int32_t position,
          const float* inv_freq, RopeStyle style);

// out[i] = silu(gate[i]) * up[i].
void SwiGlu(const float* gate, const float* up, int64_t n, float* out);

// The paged KV of one layer: K and V pools laid out
// [num_blocks][n_kv_heads][block_size][head_dim] in `dtype` (F32 or F16).
struct PagedKv {
  void* k = nullptr;
  void* v = nullptr;
  GgmlType dtype = GgmlType::kF32;
  int block_size = 16;
  int n_kv_heads = 0;
  int head_dim = 0;
};

// Causal attention for a batch of query tokens from any number of sequences.
// Token t has query q[t][n_heads][head_dim] at absolute position positions[t]
// and attends keys 0..positions[t] of its sequence, read through
// block_tables[t] (block ids of that sequence, in order). GQA: head h reads kv
// head h / (n_heads / n_kv_heads). Online softmax over key blocks: never
// materializes a score row longer than one block. out is [t][n_heads][head_dim].
void PagedAttention(const float* q, int64_t n_tokens, const int32_t* positions,
                    const int32_t* const* block_tables, const PagedKv& kv, int n_heads,
                    float scale, float* out, base::ThreadPool& pool);

// Writes one token's K and V (n_kv_heads * head_dim floats each) into slot
// `slot` of block `block` of a layer's pool (converting to kv.dtype).
void WriteKv(const PagedKv& kv, int32_t block, int slot, const float* k, const float* v);

}  // namespace tandem::engine
