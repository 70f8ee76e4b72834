// tandem-mkmodel: writes a random-weight GGUF of a given shape.
//
//   tandem-mkmodel --out FILE [--arch llama|qwen2] --dim 2048 --layers 22 --heads 32
//       --kv-heads 4 --ffn 5632 --vocab-from ggml-vocab-llama-spm.gguf --dtype Q4_0

#include <iostream>

#include "absl/flags/flag.h"
#include "common/base/flags.h"
#include "common/engine/model_builder.h"

ABSL_FLAG(std::string, out, "", "output GGUF path (required)");
ABSL_FLAG(std::string, arch, "llama", "architecture: llama or qwen2");
ABSL_FLAG(int32_t, dim, 256, "embedding width");
ABSL_FLAG(int32_t, layers, 2, "transformer blocks");
ABSL_FLAG(int32_t, heads, 8, "attention heads");
ABSL_FLAG(int32_t, kv_heads, 4, "key/value heads (GQA)");
ABSL_FLAG(int32_t, ffn, 512, "feed-forward width");
ABSL_FLAG(int32_t, context, 2048, "context length");
ABSL_FLAG(int32_t, vocab, 512, "vocabulary size when --vocab-from is not given (no tokenizer)");
ABSL_FLAG(std::string, vocab_from, "", "GGUF whose tokenizer (and vocabulary size) to copy");
ABSL_FLAG(std::string, dtype, "F32", "type of weight matrices: F32, F16, BF16, Q8_0, Q4_0");
ABSL_FLAG(bool, tied, false, "tie the output matrix to the token embedding");
ABSL_FLAG(uint64_t, seed, 1, "random seed");

int main(int argc, char** argv) {
  tandem::base::ParseFlags(argc, argv, "tandem-mkmodel --out FILE [shape flags] [--dtype TYPE]");
  tandem::engine::RandomModelSpec spec;
  spec.arch = absl::GetFlag(FLAGS_arch);
  spec.dim = absl::GetFlag(FLAGS_dim);
  spec.layers = absl::GetFlag(FLAGS_layers);
  spec.heads = absl::GetFlag(FLAGS_heads);
  spec.kv_heads = absl::GetFlag(FLAGS_kv_heads);
  spec.ffn = absl::GetFlag(FLAGS_ffn);
  spec.context = absl::GetFlag(FLAGS_context);
  spec.vocab_size = absl::GetFlag(FLAGS_vocab);
  spec.vocab_path = absl::GetFlag(FLAGS_vocab_from);
  spec.tied_embeddings = absl::GetFlag(FLAGS_tied);
  spec.seed = absl::GetFlag(FLAGS_seed);
  auto dtype = tandem::engine::GgmlTypeFromName(absl::GetFlag(FLAGS_dtype));
  if (!dtype.ok()) {
    std::cerr << "tandem-mkmodel: " << dtype.status() << "\n";
    return 1;
  }
  spec.dtype = *dtype;
  if (absl::GetFlag(FLAGS_out).empty()) {
    std::cerr << "tandem-mkmodel: --out is required\n";
    return 1;
  }
  absl::Status s = tandem::engine::WriteRandomModel(spec, absl::GetFlag(FLAGS_out));
  if (!s.ok()) {
    std::cerr << "tandem-mkmodel: " << s << "\n";
    return 1;
  }
  std::cout << "wrote " << absl::GetFlag(FLAGS_out) << "\n";
  return 0;
}
