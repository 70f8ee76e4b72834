// tandem-generate: runs one prompt through the CPU engine and prints the text
// and prefill/decode speed.
//
//   tandem-generate --model FILE (--prompt TEXT | --prompt-ids 1,2,3) [-n N]
//       [--temperature T --top-k K --top-p P --min-p P --repeat-penalty R --seed S
//        --stop STR ...] [--logits-out PATH]

#include <cstdio>
#include <iostream>
#include <string>
#include <vector>

#include "absl/flags/flag.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "common/base/flags.h"
#include "common/engine/engine.h"
#include "common/engine/format/npy.h"
#include "common/engine/generation.h"
#include "common/engine/kernels/kernels.h"
#include "common/engine/model.h"
#include "common/engine/model_store.h"

ABSL_FLAG(std::string, model, "",
          "GGUF model file, or a model name such as smollm2-135m-instruct (docs/models.md)");
ABSL_FLAG(std::string, prompt, "", "prompt text (tokenized with the model's tokenizer, BOS added)");
ABSL_FLAG(std::string, prompt_ids, "", "comma-separated prompt token ids (used as given)");
ABSL_FLAG(int32_t, n, 64, "maximum tokens to generate");
ABSL_FLAG(double, temperature, 0.0, "sampling temperature; 0 = greedy");
ABSL_FLAG(int32_t, top_k, 0, "top-k (0 = off)");
ABSL_FLAG(double, top_p, 1.0, "top-p (1 = off)");
ABSL_FLAG(double, min_p, 0.0, "min-p (0 = off)");
ABSL_FLAG(double, repeat_penalty, 1.0, "repetition penalty (1 = off)");
ABSL_FLAG(int32_t, repeat_last_n, 64, "tokens the repetition penalty looks back over (0 = all)");
ABSL_FLAG(uint64_t, seed, 0, "sampling seed");
ABSL_FLAG(std::vector<std::string>, stop, {}, "stop strings (comma-separated)");
ABSL_FLAG(bool, ignore_eos, false, "keep generating past end-of-generation tokens");
ABSL_FLAG(std::string, logits_out, "",
          "write float32 .npy [prompt tokens, vocab] of the logits after every prompt position");
ABSL_FLAG(int32_t, threads, 0, "compute threads (0 = all cores)");
ABSL_FLAG(int32_t, chunk, 512, "prefill chunk size in tokens");
ABSL_FLAG(std::string, kv_dtype, "F32", "KV cache type: F32 or F16");
ABSL_FLAG(int64_t, kv_cache_mib, 512, "KV cache size in MiB");
ABSL_FLAG(std::string, isa, "", "force a kernel ISA: scalar, avx2, avx512, avx512vnni, avx512amx");
ABSL_FLAG(bool, ids, false, "also print the generated token ids");
ABSL_FLAG(bool, repack, true,
          "repack quantized weights at load for the kernels (--norepack: borrow the "
          "file's layout, as llama.cpp's --no-repack)");

namespace {

int Fail(const absl::Status& s) {
  std::cerr << "tandem-generate: " << s << "\n";
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  tandem::base::ParseFlags(
      argc, argv,
      "tandem-generate --model FILE (--prompt TEXT | --prompt-ids 1,2,3) [-n N] [flags]");
  using tandem::engine::GgmlType;
  if (absl::GetFlag(FLAGS_model).empty()) {
    return Fail(absl::InvalidArgumentError("--model is required"));
  }
  const absl::StatusOr<std::string> path =
      tandem::engine::ResolveModelPath(absl::GetFlag(FLAGS_model));
  if (!path.ok()) return Fail(path.status());
  const std::string isa = absl::GetFlag(FLAGS_isa);
  if (!isa.empty()) {
    if (isa == "scalar") tandem::engine::SetActiveIsa(tandem::engine::Isa::kScalar);
    else if (isa == "avx2") tandem::engine::SetActiveIsa(tandem::engine::Isa::kAvx2);
    else if (isa == "avx512") tandem::engine::SetActiveIsa(tandem::engine::Isa::kAvx512);
    else if (isa == "avx512vnni") tandem::engine::SetActiveIsa(tandem::engine::Isa::kAvx512Vnni);
    else if (isa == "avx512amx")
      tandem::engine::SetActiveIsa(tandem::engine::Isa::kAvx512Amx);
    else return Fail(absl::InvalidArgumentError(absl::StrCat("unknown --isa ", isa)));
  }
  tandem::engine::SetLoadTimeRepack(absl::GetFlag(FLAGS_repack));
  auto model_or = tandem::engine::Model::Load(*path);
  if (!model_or.ok()) return Fail(model_or.status());
  const tandem::engine::Model& model = **model_or;

  std::vector<int32_t> prompt;
  if (!absl::GetFlag(FLAGS_prompt_ids).empty()) {
    for (absl::string_view part :
         absl::StrSplit(absl::GetFlag(FLAGS_prompt_ids), ',', absl::SkipWhitespace())) {
      int32_t id;
      if (!absl::SimpleAtoi(part, &id)) {
        return Fail(absl::InvalidArgumentError(absl::StrCat("--prompt-ids: bad id '", part, "'")));
      }
      prompt.push_back(id);
    }
  } else if (!absl::GetFlag(FLAGS_prompt).empty()) {
    if (model.tokenizer() == nullptr) {
      return Fail(absl::FailedPreconditionError(
          "the model has no tokenizer metadata; use --prompt-ids"));
    }
    auto ids = model.tokenizer()->Encode(absl::GetFlag(FLAGS_prompt),
                                         model.tokenizer()->add_bos(), /*parse_special=*/true);
    if (!ids.ok()) return Fail(ids.status());
    prompt = *ids;
  } else {
    return Fail(absl::InvalidArgumentError("one of --prompt or --prompt-ids is required"));
  }
  if (prompt.empty()) {
    return Fail(absl::InvalidArgumentError("the prompt has no tokens"));
  }

  tandem::engine::EngineConfig ec;
  ec.num_threads = absl::GetFlag(FLAGS_threads);
  ec.kv_cache_bytes = absl::GetFlag(FLAGS_kv_cache_mib) << 20;
  auto kv_type = tandem::engine::GgmlTypeFromName(absl::GetFlag(FLAGS_kv_dtype));
  if (!kv_type.ok()) return Fail(kv_type.status());
  ec.kv_dtype = *kv_type;
  auto engine_or = tandem::engine::Engine::Create(model, ec);
  if (!engine_or.ok()) return Fail(engine_or.status());
  tandem::engine::Engine& engine = **engine_or;

  tandem::engine::GenerateOptions opts;
  opts.max_tokens = absl::GetFlag(FLAGS_n);
  opts.prefill_chunk = absl::GetFlag(FLAGS_chunk);
  tandem::engine::SamplingParams& sp = opts.sampling;
  sp.temperature = absl::GetFlag(FLAGS_temperature);
  sp.top_k = absl::GetFlag(FLAGS_top_k);
  sp.top_p = absl::GetFlag(FLAGS_top_p);
  sp.min_p = absl::GetFlag(FLAGS_min_p);
  sp.repetition_penalty = absl::GetFlag(FLAGS_repeat_penalty);
  sp.repetition_window = absl::GetFlag(FLAGS_repeat_last_n);
  sp.seed = absl::GetFlag(FLAGS_seed);
  sp.stop_strings = absl::GetFlag(FLAGS_stop);
  sp.ignore_eos = absl::GetFlag(FLAGS_ignore_eos);
  std::vector<float> prompt_logits;
  if (!absl::GetFlag(FLAGS_logits_out).empty()) opts.prompt_logits = &prompt_logits;

  const tandem::engine::Tokenizer* tok = model.tokenizer();
  std::unique_ptr<tandem::engine::Detokenizer> detok;
  if (tok != nullptr) {
    detok = std::make_unique<tandem::engine::Detokenizer>(*tok);
    // Echo the prompt as the model sees it.
    std::cout << tok->Decode(prompt) << std::flush;
  }
  // Stream text as tokens arrive (stop strings are applied to the final text).
  opts.on_token = [&](const tandem::engine::SampleResult& s) {
    if (detok != nullptr && sp.stop_strings.empty()) std::cout << detok->Push(s.token) << std::flush;
  };
  auto result = tandem::engine::Generate(engine, /*seq=*/1, prompt, opts);
  if (!result.ok()) return Fail(result.status());
  if (detok != nullptr) {
    if (sp.stop_strings.empty()) {
      std::cout << detok->Flush();
    } else {
      std::cout << result->text;
    }
  }
  std::cout << "\n";
  if (absl::GetFlag(FLAGS_ids)) {
    std::cout << "ids:";
    for (int32_t id : result->tokens) std::cout << " " << id;
    std::cout << "\n";
  }
  if (opts.prompt_logits != nullptr) {
    const int64_t rows = static_cast<int64_t>(prompt.size());
    auto s = tandem::engine::WriteNpy(absl::GetFlag(FLAGS_logits_out),
                              {rows, static_cast<int64_t>(model.config().vocab_size)},
                              prompt_logits);
    if (!s.ok()) return Fail(s);
  }
  const double prefill_s = absl::ToDoubleSeconds(result->prefill_time);
  const double decode_s = absl::ToDoubleSeconds(result->decode_time);
  const size_t decoded = result->tokens.size();
  std::cerr << absl::StrFormat(
      "prefill: %d tokens in %.3f s (%.1f tok/s)\ndecode: %d tokens in %.3f s (%.1f tok/s)\n"
      "finish: %s; threads %d; isa %s; weights %s\n",
      static_cast<int>(prompt.size()), prefill_s,
      prefill_s > 0 ? prompt.size() / prefill_s : 0.0, static_cast<int>(decoded), decode_s,
      decode_s > 0 && decoded > 1 ? (decoded - 1) / decode_s : 0.0,
      tandem::engine::FinishReasonName(result->finish), engine.pool().num_threads(),
      tandem::engine::IsaName(tandem::engine::ActiveIsa()),
      std::string(tandem::engine::GgmlTypeName(model.config().weight_type)));
  return 0;
}
