// Writes the seed corpora that are not plain text (tests/fuzz/corpus/):
// small GGUF files made with the repository's own GgufWriter, and
// serialized worker requests for worker_rpc_fuzzer (a method byte, then the
// message). Run from the repository root after changing a format:
//   build-fuzz/bin/fuzz_make_seeds tests/fuzz/corpus
// Text seeds (OpenAI bodies, chat lists, tokenizer strings) are edited by hand.

#include <cstdint>
#include <cstdio>
#include <fstream>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/engine/format/gguf.h"
#include "tandem/v1/worker.pb.h"

namespace tandem {
namespace {

using engine::GgmlType;
using engine::GgufValue;
using engine::GgufValueType;
using engine::GgufWriter;

void Write(const std::string& path, const std::string& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  if (!out) {
    std::fprintf(stderr, "cannot write %s\n", path.c_str());
    std::exit(1);
  }
}

std::string Serialized(const GgufWriter& w) {
  absl::StatusOr<std::vector<uint8_t>> bytes = w.Serialize();
  if (!bytes.ok()) {
    std::fprintf(stderr, "serialize: %s\n", std::string(bytes.status().message()).c_str());
    std::exit(1);
  }
  return std::string(bytes->begin(), bytes->end());
}

void AddF32(GgufWriter& w, const std::string& name, GgmlType type, std::vector<int64_t> dims) {
  int64_t n = 1;
  for (int64_t d : dims) n *= d;
  std::vector<float> values(n);
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 7) - 3.0f;
  if (!w.AddTensorFromF32(name, type, std::move(dims), values).ok()) {
    std::fprintf(stderr, "cannot add tensor %s\n", name.c_str());
    std::exit(1);
  }
}

// A tiny SPM vocabulary: control tokens, byte fallback for \n, a few words.
void SetSpmVocab(GgufWriter& w) {
  w.SetString("tokenizer.ggml.model", "llama");
  w.SetStringArray("tokenizer.ggml.tokens",
                   {"<unk>", "<s>", "</s>", "<0x0A>", "\xE2\x96\x81", "a", "b", "\xE2\x96\x81" "a",
                    "ab"});
  w.SetFloat32Array("tokenizer.ggml.scores", {0, 0, 0, 0, -1, -2, -3, -1.5f, -0.5f});
  w.SetInt32Array("tokenizer.ggml.token_type", {2, 3, 3, 6, 1, 1, 1, 1, 1});
  w.SetUint32("tokenizer.ggml.bos_token_id", 1);
  w.SetUint32("tokenizer.ggml.eos_token_id", 2);
}

void GgufSeeds(const std::string& dir) {
  GgufWriter model;
  model.SetString("general.architecture", "llama");
  model.SetUint32("llama.context_length", 64);
  model.SetUint32("llama.embedding_length", 8);
  model.SetUint32("llama.block_count", 1);
  SetSpmVocab(model);
  AddF32(model, "token_embd.weight", GgmlType::kF32, {8, 9});
  AddF32(model, "output_norm.weight", GgmlType::kF16, {8});
  AddF32(model, "blk.0.attn_q.weight", GgmlType::kQ8_0, {32, 2});
  AddF32(model, "blk.0.ffn_up.weight", GgmlType::kQ4_0, {32, 1, 1, 2});
  AddF32(model, "blk.0.ffn_down.weight", GgmlType::kBF16, {4, 2});
  const std::string tiny = Serialized(model);
  Write(dir + "/tiny_llama.gguf", tiny);
  // Cut inside the tensor infos, and inside the data section.
  Write(dir + "/truncated_infos.gguf", tiny.substr(0, tiny.size() / 2));
  // The file is padded to the alignment: cut inside the first row of the last tensor.
  const auto parsed = engine::GgufFile::FromBuffer(
      absl::MakeConstSpan(reinterpret_cast<const uint8_t*>(tiny.data()), tiny.size()));
  if (!parsed.ok() || (*parsed)->tensors().empty()) {
    std::fprintf(stderr, "the tiny model does not parse back\n");
    std::exit(1);
  }
  const engine::GgufTensorInfo& last = (*parsed)->tensors().back();
  const size_t last_begin = (*parsed)->data_offset() + last.offset;
  Write(dir + "/truncated_data.gguf", tiny.substr(0, last_begin + 2));
  std::string bad_magic = tiny;
  bad_magic[0] = 'X';
  Write(dir + "/bad_magic.gguf", bad_magic);
  std::string v2 = tiny;
  v2[4] = 2;  // version 2 (same layout as 3)
  Write(dir + "/version2.gguf", v2);

  GgufWriter bpe;
  bpe.SetString("tokenizer.ggml.model", "gpt2");
  bpe.SetString("tokenizer.ggml.pre", "llama-bpe");
  bpe.SetStringArray("tokenizer.ggml.tokens", {"a", "b", "ab", "\xC4\xA0", "\xC4\xA0" "a", "<|end|>"});
  bpe.SetStringArray("tokenizer.ggml.merges", {"a b", "\xC4\xA0 a"});
  bpe.SetInt32Array("tokenizer.ggml.token_type", {1, 1, 1, 1, 1, 3});
  bpe.SetUint32("tokenizer.ggml.eos_token_id", 5);
  bpe.SetString("tokenizer.chat_template", "{{ '<|im_start|>' + message['role'] }}");
  Write(dir + "/bpe_vocab.gguf", Serialized(bpe));

  // Every value type, nested arrays, a larger alignment.
  GgufWriter values;
  values.SetAlignment(64);
  const GgufValueType scalars[] = {
      GgufValueType::kUint8, GgufValueType::kInt8, GgufValueType::kUint16, GgufValueType::kInt16,
      GgufValueType::kUint32, GgufValueType::kInt32, GgufValueType::kFloat32, GgufValueType::kBool,
      GgufValueType::kUint64, GgufValueType::kInt64, GgufValueType::kFloat64};
  GgufValue nested;
  nested.type = GgufValueType::kArray;
  nested.array_type = GgufValueType::kArray;
  for (GgufValueType t : scalars) {
    GgufValue v;
    v.type = t;
    v.i = 1;
    v.u = 1;
    v.f = 1.5;
    values.SetValue(std::string("value.") + engine::GgufValueTypeName(t), v);
    GgufValue a;
    a.type = GgufValueType::kArray;
    a.array_type = t;
    a.array = {v, v};
    nested.array.push_back(a);
  }
  values.SetValue("value.nested", nested);
  values.SetString("value.string", "h\xC3\xA9llo");
  AddF32(values, "t", GgmlType::kF32, {3});
  Write(dir + "/all_value_types.gguf", Serialized(values));
}

void WriteRpc(const std::string& dir, const std::string& name, uint8_t method,
              const google::protobuf::Message& msg) {
  Write(dir + "/" + name, std::string(1, static_cast<char>(method)) + msg.SerializeAsString());
}

tandem::v1::DecodeSubmit Submit(int prompt_len, int max_tokens) {
  tandem::v1::DecodeSubmit s;
  for (int i = 0; i < prompt_len; ++i) s.add_prompt_ids(1 + (i * 37) % 500);
  s.set_max_tokens(max_tokens);
  return s;
}

void WorkerSeeds(const std::string& dir) {
  tandem::v1::ReserveRequest reserve;
  *reserve.mutable_request() = Submit(20, 4);
  WriteRpc(dir, "reserve", 0, reserve);
  reserve.mutable_request()->set_request_id("fuzz-1");
  reserve.mutable_request()->mutable_sampling()->set_temperature(0.8f);
  reserve.mutable_request()->mutable_sampling()->set_top_k(5);
  reserve.mutable_request()->mutable_sampling()->set_seed(7);
  reserve.mutable_request()->mutable_sampling()->add_stop("the");
  WriteRpc(dir, "reserve_sampled", 0, reserve);

  tandem::v1::CommitRequest commit;
  commit.set_request_id("fuzz-1");
  commit.set_first_token(5);
  commit.set_num_tokens(20);
  commit.set_bytes_written(1024);
  WriteRpc(dir, "commit", 1, commit);
  WriteRpc(dir, "commit_live", 5, commit);
  commit.set_abort(true);
  WriteRpc(dir, "commit_live_abort", 5, commit);

  tandem::v1::CancelRequest cancel;
  cancel.set_request_id("fuzz-1");
  WriteRpc(dir, "cancel", 2, cancel);

  tandem::v1::DecodeSubmit generate = Submit(12, 8);
  generate.mutable_sampling()->set_logprobs(true);
  generate.mutable_sampling()->set_top_logprobs(3);
  generate.mutable_sampling()->add_stop_token_ids(2);
  WriteRpc(dir, "generate", 3, generate);
  generate = Submit(600, 4);  // longer than the context
  WriteRpc(dir, "generate_long", 3, generate);

  tandem::v1::PrefillRequest prefill;
  *prefill.mutable_request() = Submit(20, 4);
  prefill.mutable_request()->set_request_id("fuzz-2");
  tandem::v1::KvReservation* r = prefill.mutable_reservation();
  r->set_request_id("fuzz-2");
  r->add_block_ids(0);
  r->add_block_ids(1);
  r->mutable_layout()->set_block_size(16);
  r->mutable_layout()->set_dtype("F32");
  r->set_worker_address("loopback:1");
  r->set_transfer_tag(1);
  WriteRpc(dir, "prefill_forged", 4, prefill);
  WriteRpc(dir, "prefill_live_merged", 6, prefill);
  WriteRpc(dir, "prefill_live", 6, tandem::v1::PrefillRequest());
}

}  // namespace
}  // namespace tandem

int main(int argc, char** argv) {
  if (argc != 2) {
    std::fprintf(stderr, "usage: fuzz_make_seeds CORPUS_DIR (tests/fuzz/corpus)\n");
    return 2;
  }
  const std::string root = argv[1];
  tandem::GgufSeeds(root + "/gguf_reader_fuzzer");
  tandem::WorkerSeeds(root + "/worker_rpc_fuzzer");
  return 0;
}
