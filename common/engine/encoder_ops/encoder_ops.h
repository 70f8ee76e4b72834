#pragma once
// The encoder's elementwise and attention passes (engine::Encoder), written
// once as plain loops in encoder_ops.inc and compiled three times: for the
// baseline ISA (the reference), with AVX2+FMA and with AVX-512, so that the
// compiler vectorizes them at each width. Ops() picks the table for
// ActiveIsa() (common/engine/kernels), so SetActiveIsa compares the paths.
// Each op works on rows independently (batch invariant).

#include <cstdint>

#include "common/engine/kernels/kernels.h"

namespace tandem::engine::encoder_ops {

// Queries AttendHead computes together (sharing each K and V load).
inline constexpr int kAttendQueries = 4;

// Scratch one AttendHead call needs, in floats, for a sequence of len tokens.
inline int64_t AttendScratchFloats(int64_t len, int64_t head_dim) {
  const int64_t len16 = (len + 15) / 16 * 16;  // keys padded to whole 16-float vectors
  return head_dim * len16 + kAttendQueries * len16;
}

struct Table {
  // x[r][i] += bias[i] for r < rows, i < n.
  void (*add_bias)(float* x, int64_t rows, int64_t n, const float* bias);
  // x = gelu_erf(x + bias) row by row.
  void (*bias_gelu)(float* x, int64_t rows, int64_t n, const float* bias);
  // x = LayerNorm(x + residual) * w + b row by row (residual may be null).
  void (*add_layer_norm)(float* x, const float* residual, int64_t rows, int64_t n, const float* w,
                         const float* b, float eps);
  // One head of bidirectional attention over len tokens: q, k, v and out
  // point at the head's slice of row 0, rows ld floats apart;
  // out[i] = softmax(scale * q[i] . k[j])_j . v[j]. scratch holds
  // AttendScratchFloats(len, head_dim) floats.
  void (*attend_head)(const float* q, const float* k, const float* v, int64_t ld, int64_t len,
                      int64_t head_dim, float scale, float* scratch, float* out);
  // a . b over n floats (the router's HNSW distance: 1 - a . b of unit embeddings).
  float (*dot)(const float* a, const float* b, int64_t n);
};

const Table& Ops();           // for ActiveIsa()
const Table& OpsFor(Isa isa);  // clamped to what was compiled in

}  // namespace tandem::engine::encoder_ops
