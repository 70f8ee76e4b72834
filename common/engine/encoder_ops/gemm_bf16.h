#pragma once
// The encoder's optional BF16 GEMM (Encoder::Load with Precision::kBf16):
// weights packed once as bf16, activations rounded to bf16 per call, products
// summed in fp32 by AVX512-BF16's VDPBF16PS (two products per lane per
// instruction, twice the F32 FMA's rate), or by AMX tiles' TDPBF16PS where the
// CPU has AMX-BF16 and the kernel grants the tile state (AmxSupported(); the
// same packed panels, 16 x 16 x 32 products per instruction). Only on CPUs
// with AVX512-BF16 (Bf16Supported()); elsewhere the encoder keeps its F32 path.

#include <cstdint>
#include <vector>

namespace tandem::engine::encoder_ops {

// Whether the AVX512-BF16 kernels may run: the CPU has AVX512-BF16 and the
// active ISA (SetActiveIsa) is AVX-512.
bool Bf16Supported();

// Whether GemmBf16Panels runs on AMX tiles: Bf16Supported(), the CPU has
// AMX-TILE and AMX-BF16, Linux granted this process the tile data state
// (arch_prctl ARCH_REQ_XCOMP_PERM, asked once) and SetAmxEnabled(false) was
// not called.
bool AmxSupported();

// Turns the AMX path off (false) or back on (true, the default), process-wide:
// for tests and benchmarks comparing it with the AVX512-BF16 one.
void SetAmxEnabled(bool enabled);

// A weight matrix of rows x cols (cols even) and its bias, packed for
// GemmBf16Panels: panels of 16 rows, k in pairs: [panel][cols / 2][16][2]
// bf16 (round to nearest even), zero-padded; bias fp32, zero-padded.
struct PackedBf16 {
  int64_t rows = 0;
  int64_t cols = 0;
  std::vector<uint16_t> panels;
  std::vector<float> bias;
};

// Packs w ([rows][cols] fp32, row-major) and bias ([rows]).
PackedBf16 PackBf16(const float* w, const float* bias, int64_t rows, int64_t cols);

// out[i] = bf16(x[i]) (round to nearest even) for i < n. Needs Bf16Supported().
void ToBf16(const float* x, int64_t n, uint16_t* out);

// y[i][r] = bias[r] + sum_k xb[i][k] * w[r][k] (xb: m rows of cols bf16 from
// ToBf16) for the rows r of panels [p0, p1). y is [m][rows]. Per row the sum's
// order does not depend on m (batch invariant): the path (AMX when
// AmxSupported() and cols is a multiple of 32, AVX512-BF16 otherwise) depends
// on the CPU and w only. Needs Bf16Supported().
void GemmBf16Panels(const uint16_t* xb, int64_t m, const PackedBf16& w, int64_t p0, int64_t p1,
                    float* y);

// GemmBf16Panels on AMX tiles (gemm_amx.cc). Needs AmxSupported() and cols a
// multiple of 32.
void GemmAmxPanels(const uint16_t* xb, int64_t m, const PackedBf16& w, int64_t p0, int64_t p1,
                   float* y);

}  // namespace tandem::engine::encoder_ops
