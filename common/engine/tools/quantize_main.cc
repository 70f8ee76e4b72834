// tandem-quantize IN OUT TYPE: converts an F32/F16/BF16 GGUF to Q8_0, Q4_0, Q4_K_M or one of
// the pure Q4_1 ... Q6_K types the way llama.cpp's quantize tool does (see QuantizeGgufFile in common/engine/format/gguf.h).

#include <cstdio>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "common/base/flags.h"
#include "common/engine/format/ggml_type.h"
#include "common/engine/format/gguf.h"

namespace {

constexpr char kUsage[] =
    "usage: tandem-quantize IN.gguf OUT.gguf TYPE\n"
    "\n"
    "Converts an F32/F16/BF16 GGUF model to TYPE, one of Q8_0, Q4_0, Q4_K_M, Q4_1, Q5_0,\n"
    "Q5_1, Q4_K, Q5_K or Q6_K\n"
    "(case-insensitive), as llama.cpp's quantize does without an importance matrix:\n"
    "  - tensors named *weight with 2 or more dims whose row length (dim 0) is a multiple\n"
    "    of the block size are quantized; *_norm.weight, ffn_gate_inp.weight (MoE router),\n"
    "    position and token-type embeddings are not;\n"
    "  - with Q4_0, output.weight (or token_embd.weight when the model has no output.weight,\n"
    "    i.e. tied embeddings) is stored as Q8_0 (llama.cpp: Q6_K);\n"
    "  - Q4_K_M: Q4_K, with the output tensor and llama.cpp's use_more_bits share of\n"
    "    attn_v / ffn_down in Q6_K; rows not a multiple of 256 fall back to Q5_0 / Q8_0;\n"
    "  - Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K: every quantizable tensor, output included,\n"
    "    in that type, as llama.cpp's quantize --pure (its own Q4_K / Q5_K names mean the\n"
    "    Q4_K_M / Q5_K_M mixtures); K-quant rows not a multiple of 256 fall back to Q5_0,\n"
    "    Q5_1, Q8_0 respectively;\n"
    "  - every other tensor (1-D norms, biases, rope_freqs) is copied unchanged;\n"
    "  - all metadata is kept; general.file_type is set to llama.cpp's value (7 Q8_0,\n"
    "    2 Q4_0, 15 Q4_K_M, 3 Q4_1, 8 Q5_0, 9 Q5_1, 14 Q4_K, 16 Q5_K, 18 Q6_K) and\n"
    "    general.quantization_version to 2.\n"
    "Inputs whose quantizable tensors are already quantized are refused.\n";

std::string Dims(const std::vector<int64_t>& dims) {
  return absl::StrCat("[", absl::StrJoin(dims, ", "), "]");
}

double Mib(int64_t bytes) { return static_cast<double>(bytes) / (1024.0 * 1024.0); }

}  // namespace

int main(int argc, char** argv) {
  // No flags of its own: --help prints kUsage, and a stray --flag is an error, not a file.
  const std::vector<char*> args = tandem::base::ParseFlags(argc, argv, kUsage);
  if (args.size() != 4) {
    std::fprintf(stderr, "tandem-quantize: expected 3 arguments, got %d\n\n%s",
                 static_cast<int>(args.size()) - 1, kUsage);
    return 2;
  }
  const std::string in = args[1];
  const std::string out = args[2];
  absl::StatusOr<tandem::engine::QuantRecipe> type = tandem::engine::QuantRecipeFromName(args[3]);
  if (!type.ok()) {
    std::fprintf(stderr, "tandem-quantize: %s\n", std::string(type.status().message()).c_str());
    return 2;
  }

  tandem::engine::GgufQuantizeReport report;
  absl::Status s = tandem::engine::QuantizeGgufFile(in, out, *type, &report);
  if (!s.ok()) {
    std::fprintf(stderr, "tandem-quantize: %s\n", s.ToString().c_str());
    return 1;
  }
  const size_t n = report.tensors.size();
  for (size_t i = 0; i < n; ++i) {
    const tandem::engine::GgufQuantizeTensorReport& t = report.tensors[i];
    const bool converted = t.from != t.to;
    std::printf("[%4zu/%4zu] %-40s %-22s %4s -> %-4s %10.3f KiB -> %10.3f KiB%s\n", i + 1, n,
                t.name.c_str(), Dims(t.dims).c_str(),
                std::string(tandem::engine::GgmlTypeName(t.from)).c_str(),
                std::string(tandem::engine::GgmlTypeName(t.to)).c_str(), t.bytes_before / 1024.0,
                t.bytes_after / 1024.0, converted ? "" : " (copied)");
  }
  std::printf("tensor data: %.3f MiB -> %.3f MiB (%.1f%%)\n", Mib(report.bytes_before),
              Mib(report.bytes_after),
              report.bytes_before > 0 ? 100.0 * report.bytes_after / report.bytes_before : 100.0);
  std::printf("file size:   %.3f MiB -> %.3f MiB\n", Mib(report.file_bytes_before),
              Mib(report.file_bytes_after));
  std::printf("wrote %s (%s)\n", out.c_str(),
              std::string(tandem::engine::QuantRecipeName(*type)).c_str());
  return 0;
}
