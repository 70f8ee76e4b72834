// QuantizeGgufFile: F32/F16/BF16 GGUF to Q8_0 / Q4_0 / Q4_K_M and the pure
// Q4_1 ... Q6_K types, as llama.cpp's quantize.

#include <filesystem>
#include <string>
#include <utility>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/status_macros.h"
#include "common/engine/format/gguf.h"
#include "common/engine/format/internal/gguf_common.h"

namespace tandem::engine {
namespace {

// llama.cpp's tensor_allows_quantization (llama-quant.cpp), less the options
// we don't have.
bool AllowsQuantization(const GgufTensorInfo& t) {
  const absl::string_view name = t.name;
  if (!absl::EndsWith(name, "weight") || t.dims.size() < 2) {
    return false;
  }
  for (absl::string_view excluded : {"_norm.weight", "ffn_gate_inp.weight", "altup", "laurel",
                                     "per_layer_model_proj", "ssm_conv1d", "shortconv.conv.weight",
                                     "time_mix_", "attn_rel_b.weight", ".position_embd."}) {
    if (absl::StrContains(name, excluded)) {
      return false;
    }
  }
  return name != "position_embd.weight" && name != "token_types.weight";
}

// llama.cpp's use_more_bits: the first and last eighth of the layers and
// every third one in between get more bits.
bool UseMoreBits(int i, int n) { return i < n / 8 || i >= 7 * n / 8 || (i - n / 8) % 3 == 2; }

// llama.cpp's fallback for a K-quant whose row length is not a multiple of 256.
GgmlType KQuantFallback(GgmlType type) {
  switch (type) {
    case GgmlType::kQ4_K:
      return GgmlType::kQ5_0;
    case GgmlType::kQ5_K:
      return GgmlType::kQ5_1;
    case GgmlType::kQ6_K:
      return GgmlType::kQ8_0;
    default:
      return type;
  }
}

// Every recipe: its name, the type of an ordinary quantizable tensor, the
// output tensor's type and llama.cpp's general.file_type.
struct RecipeInfo {
  QuantRecipe recipe;
  absl::string_view name;
  GgmlType base;
  GgmlType output;
  uint32_t file_type;
};

constexpr RecipeInfo kRecipes[] = {
    {QuantRecipe::kQ8_0, "Q8_0", GgmlType::kQ8_0, GgmlType::kQ8_0, kLlamaFtypeMostlyQ8_0},
    {QuantRecipe::kQ4_0, "Q4_0", GgmlType::kQ4_0, GgmlType::kQ8_0, kLlamaFtypeMostlyQ4_0},
    {QuantRecipe::kQ4_K_M, "Q4_K_M", GgmlType::kQ4_K, GgmlType::kQ6_K, kLlamaFtypeMostlyQ4_K_M},
    {QuantRecipe::kQ4_1, "Q4_1", GgmlType::kQ4_1, GgmlType::kQ4_1, kLlamaFtypeMostlyQ4_1},
    {QuantRecipe::kQ5_0, "Q5_0", GgmlType::kQ5_0, GgmlType::kQ5_0, kLlamaFtypeMostlyQ5_0},
    {QuantRecipe::kQ5_1, "Q5_1", GgmlType::kQ5_1, GgmlType::kQ5_1, kLlamaFtypeMostlyQ5_1},
    {QuantRecipe::kQ4_K, "Q4_K", GgmlType::kQ4_K, GgmlType::kQ4_K, kLlamaFtypeMostlyQ4_K_S},
    {QuantRecipe::kQ5_K, "Q5_K", GgmlType::kQ5_K, GgmlType::kQ5_K, kLlamaFtypeMostlyQ5_K_S},
    {QuantRecipe::kQ6_K, "Q6_K", GgmlType::kQ6_K, GgmlType::kQ6_K, kLlamaFtypeMostlyQ6_K},
};

const RecipeInfo& Info(QuantRecipe recipe) {
  for (const RecipeInfo& r : kRecipes) {
    if (r.recipe == recipe) {
      return r;
    }
  }
  return kRecipes[0];  // unreachable: every enumerator is listed
}

std::string RecipeNames() {
  std::string names;
  for (const RecipeInfo& r : kRecipes) {
    absl::StrAppend(&names, names.empty() ? "" : ", ", r.name);
  }
  return names;
}

}  // namespace

absl::StatusOr<QuantRecipe> QuantRecipeFromName(absl::string_view name) {
  for (const RecipeInfo& r : kRecipes) {
    if (absl::EqualsIgnoreCase(name, r.name)) {
      return r.recipe;
    }
  }
  return absl::InvalidArgumentError(
      absl::StrCat("unknown quantization '", name, "' (valid: ", RecipeNames(), ")"));
}

absl::string_view QuantRecipeName(QuantRecipe recipe) { return Info(recipe).name; }

std::vector<GgmlType> PlanQuantization(const GgufFile& file, QuantRecipe recipe) {
  const bool has_output = file.FindTensor("output.weight") != nullptr;
  const auto& tensors = file.tensors();
  int n_attn_v = 0;
  int n_ffn_down = 0;
  for (const GgufTensorInfo& t : tensors) {
    n_attn_v += absl::StrContains(t.name, "attn_v.weight") ? 1 : 0;
    n_ffn_down += absl::StrContains(t.name, "ffn_down") ? 1 : 0;
  }
  int i_attn_v = 0;
  int i_ffn_down = 0;
  std::vector<GgmlType> plan;
  plan.reserve(tensors.size());
  for (const GgufTensorInfo& t : tensors) {
    if (!AllowsQuantization(t)) {
      plan.push_back(t.type);
      continue;
    }
    const bool is_output =
        t.name == "output.weight" || (!has_output && t.name == "token_embd.weight");
    const RecipeInfo& info = Info(recipe);
    GgmlType type = is_output ? info.output : info.base;
    if (recipe == QuantRecipe::kQ4_K_M && !is_output) {
      if (absl::StrContains(t.name, "attn_v.weight")) {
        type = UseMoreBits(i_attn_v++, n_attn_v) ? GgmlType::kQ6_K : type;
      } else if (absl::StrContains(t.name, "ffn_down")) {
        type = UseMoreBits(i_ffn_down++, n_ffn_down) ? GgmlType::kQ6_K : type;
      }
    }
    if (t.dims[0] % kQK_K != 0) {
      type = KQuantFallback(type);
    }
    plan.push_back(t.dims[0] % GgmlBlockSize(type) != 0 ? t.type : type);
  }
  return plan;
}

absl::Status QuantizeGgufFile(const std::string& in, const std::string& out, GgmlType type,
                              GgufQuantizeReport* report) {
  for (const RecipeInfo& r : kRecipes) {
    if (r.recipe != QuantRecipe::kQ4_K_M && r.base == type) {
      return QuantizeGgufFile(in, out, r.recipe, report);
    }
  }
  return absl::InvalidArgumentError(absl::StrCat(
      "cannot quantize to ", GgmlTypeName(type),
      " (valid targets: Q8_0, Q4_0, Q4_1, Q5_0, Q5_1, Q4_K, Q5_K, Q6_K)"));
}

absl::Status QuantizeGgufFile(const std::string& in, const std::string& out, QuantRecipe recipe,
                              GgufQuantizeReport* report) {
  ASSIGN_OR_RETURN(std::unique_ptr<GgufFile> file, GgufFile::Open(in));
  GgufQuantizeReport local;
  GgufQuantizeReport& rep = report != nullptr ? *report : local;
  rep = GgufQuantizeReport{};

  GgufWriter writer;
  for (const std::string& key : file->metadata_keys()) {
    writer.SetValue(key, *file->Find(key));
  }
  writer.SetUint32("general.file_type", Info(recipe).file_type);
  writer.SetUint32("general.quantization_version", 2);  // GGML_QNT_VERSION

  const std::vector<GgmlType> plan = PlanQuantization(*file, recipe);
  const auto& tensors = file->tensors();
  for (size_t i = 0; i < tensors.size(); ++i) {
    const GgufTensorInfo& t = tensors[i];
    const GgmlType to = plan[i];
    if (to == t.type) {
      RETURN_IF_ERROR(writer.AddTensor(t.name, t.type, t.dims,
                                       std::vector<uint8_t>(t.data, t.data + t.num_bytes)));
    } else {
      if (t.type != GgmlType::kF32 && t.type != GgmlType::kF16 && t.type != GgmlType::kBF16) {
        return absl::FailedPreconditionError(absl::StrFormat(
            "%s: tensor %d (%s) is already %s; requantizing to %s is not supported (quantize "
            "from an F32, F16 or BF16 file)",
            in, i, internal::Quoted(t.name), GgmlTypeName(t.type), GgmlTypeName(to)));
      }
      const int64_t row = t.dims[0];
      std::vector<float> values(t.num_elements);
      if (row > 0) {
        const int64_t row_bytes = GgmlRowBytes(t.type, row);
        for (int64_t r = 0; r < t.num_elements / row; ++r) {
          DequantizeRow(t.type, t.data + r * row_bytes, values.data() + r * row, row);
        }
      }
      RETURN_IF_ERROR(writer.AddTensorFromF32(t.name, to, t.dims, values));
    }
    GgufQuantizeTensorReport line;
    line.name = t.name;
    line.dims = t.dims;
    line.from = t.type;
    line.to = to;
    line.bytes_before = t.num_bytes;
    int64_t ignored = 0;
    RETURN_IF_ERROR(internal::CheckDims(t.dims, to, &ignored, &line.bytes_after));
    rep.bytes_before += line.bytes_before;
    rep.bytes_after += line.bytes_after;
    rep.tensors.push_back(std::move(line));
  }
  RETURN_IF_ERROR(writer.WriteFile(out));

  std::error_code ec;
  rep.file_bytes_before = static_cast<int64_t>(std::filesystem::file_size(in, ec));
  rep.file_bytes_after = static_cast<int64_t>(std::filesystem::file_size(out, ec));
  return absl::OkStatus();
}

}  // namespace tandem::engine
