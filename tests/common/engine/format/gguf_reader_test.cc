// Tests for the GGUF reader (common/engine/format/gguf_reader.cc): real files,
// and hostile input (hand-assembled images, every truncation, random header
// mutations).
//
// The bad-input tests and the mutation fuzz loop are meant to run under
// AddressSanitizer too (-DTANDEM_ASAN=ON): FromBuffer copies into an exactly
// sized buffer, so any read past the image is reported.

#include <algorithm>
#include <cstring>
#include <fstream>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "common/engine/format/ggml_type.h"
#include "common/engine/format/gguf.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/common/engine/format/gguf_test_util.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem::engine::testing {
namespace {

using ::tandem::testing::RequireSharedFile;
using ::testing::AllOf;
using ::testing::AnyOf;

// Hand-assembled GGUF images for the hostile-input tests.
class Raw {
 public:
  Raw& U8(uint8_t v) { return Put(v); }
  Raw& U32(uint32_t v) { return Put(v); }
  Raw& U64(uint64_t v) { return Put(v); }
  Raw& F32(float v) { return Put(v); }
  Raw& Str(const std::string& s) {
    U64(s.size());
    bytes_.insert(bytes_.end(), s.begin(), s.end());
    return *this;
  }
  Raw& Header(uint32_t version, uint64_t n_tensors, uint64_t n_kv) {
    bytes_.insert(bytes_.end(), {'G', 'G', 'U', 'F'});
    return U32(version).U64(n_tensors).U64(n_kv);
  }
  Raw& KvU32(const std::string& key, uint32_t v) {
    return Str(key).U32(static_cast<uint32_t>(GgufValueType::kUint32)).U32(v);
  }
  Raw& TensorInfo(const std::string& name, const std::vector<uint64_t>& dims, uint32_t type,
                  uint64_t offset) {
    Str(name).U32(dims.size());
    for (uint64_t d : dims) {
      U64(d);
    }
    return U32(type).U64(offset);
  }
  Raw& PadTo(size_t alignment) {
    bytes_.resize((bytes_.size() + alignment - 1) / alignment * alignment, 0);
    return *this;
  }
  Raw& Zeros(size_t n) {
    bytes_.resize(bytes_.size() + n, 0);
    return *this;
  }
  const std::vector<uint8_t>& bytes() const { return bytes_; }

 private:
  template <typename T>
  Raw& Put(T v) {
    const size_t at = bytes_.size();
    bytes_.resize(at + sizeof(T));
    std::memcpy(bytes_.data() + at, &v, sizeof(T));
    return *this;
  }
  std::vector<uint8_t> bytes_;
};

// One F32 tensor of n floats at offset 0 after a header with the given kvs.
std::vector<uint8_t> OneTensorFile(const std::string& name, const std::vector<uint64_t>& dims,
                                   uint32_t type, uint64_t offset, size_t data_bytes) {
  Raw r;
  r.Header(3, 1, 0).TensorInfo(name, dims, type, offset).PadTo(32).Zeros(data_bytes);
  return r.bytes();
}

// ---------------------------------------------------------------------------
// Real files

TEST(GgufRealFileTest, Stories260K) {
  const std::string path = RequireSharedFile(kStories);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, GgufFile::Open(path));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_EQ(f->metadata().size(), 19u);
  EXPECT_EQ(f->metadata_keys().size(), 19u);
  EXPECT_EQ(f->metadata_keys().front(), "tokenizer.ggml.tokens");
  EXPECT_EQ(f->metadata_keys().back(), "llama.attention.layer_norm_rms_epsilon");
  EXPECT_EQ(f->tensors().size(), 48u);
  EXPECT_EQ(f->data_offset(), 14176u);
  EXPECT_EQ(f->alignment(), 32u);
  EXPECT_EQ(f->Find("general.alignment"), nullptr);

  EXPECT_EQ(*f->GetString("general.architecture"), "llama");
  EXPECT_EQ(*f->GetString("tokenizer.ggml.model"), "llama");
  EXPECT_EQ(*f->GetInt("llama.embedding_length"), 64);
  EXPECT_EQ(*f->GetInt("llama.feed_forward_length"), 172);
  EXPECT_EQ(*f->GetInt("llama.block_count"), 5);
  EXPECT_EQ(*f->GetInt("llama.attention.head_count"), 8);
  EXPECT_EQ(*f->GetInt("llama.attention.head_count_kv"), 4);
  EXPECT_EQ(*f->GetInt("llama.rope.dimension_count"), 8);
  EXPECT_EQ(*f->GetInt("llama.context_length"), 2048);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.bos_token_id"), 1);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.eos_token_id"), 2);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.unknown_token_id"), 0);
  EXPECT_EQ(*f->GetInt("tokenizer.ggml.padding_token_id"), 4294967295);
  EXPECT_NEAR(*f->GetFloat("llama.attention.layer_norm_rms_epsilon"), 1e-5, 1e-12);
  EXPECT_NEAR(*f->GetFloat("llama.embedding_length"), 64.0, 0);  // ints read as floats

  ASSERT_OK_AND_ASSIGN(std::vector<std::string> tokens, f->GetStringArray("tokenizer.ggml.tokens"));
  ASSERT_EQ(tokens.size(), 512u);
  EXPECT_EQ(tokens[0], "<unk>");
  EXPECT_EQ(tokens[1], "<s>");
  EXPECT_EQ(tokens[2], "</s>");
  EXPECT_EQ(tokens[3], "<0x00>");
  EXPECT_EQ(tokens[258], "<0xFF>");
  ASSERT_OK_AND_ASSIGN(std::vector<double> scores, f->GetFloatArray("tokenizer.ggml.scores"));
  ASSERT_EQ(scores.size(), 512u);
  EXPECT_EQ(scores[259], 0.0);
  EXPECT_EQ(scores[260], -1.0);
  EXPECT_EQ(scores[511], -252.0);
  ASSERT_OK_AND_ASSIGN(std::vector<int64_t> types, f->GetIntArray("tokenizer.ggml.token_type"));
  ASSERT_EQ(types.size(), 512u);
  EXPECT_EQ(types[0], 2);
  EXPECT_EQ(types[1], 3);
  EXPECT_EQ(types[3], 6);

  // Typed getter errors name the key and the actual type.
  EXPECT_THAT(f->GetString("llama.block_count"),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("llama.block_count"), HasSubstr("uint32"))));
  EXPECT_THAT(f->GetInt("general.architecture"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("string")));
  EXPECT_THAT(f->GetBool("llama.block_count"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a bool")));
  EXPECT_THAT(f->GetIntArray("tokenizer.ggml.scores"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array<float32>")));
  EXPECT_THAT(f->GetStringArray("llama.block_count"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an array")));
  EXPECT_THAT(f->GetInt("no.such.key"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("no.such.key")));

  // Shapes (PROVENANCE.md), all F32, data inside the file.
  const uint64_t file_size = ReadBytes(path).size();
  EXPECT_EQ(file_size, 1185376u);
  auto expect_tensor = [&](const std::string& name, std::vector<int64_t> dims) {
    const GgufTensorInfo* t = f->FindTensor(name);
    ASSERT_NE(t, nullptr) << name;
    EXPECT_EQ(t->dims, dims) << name;
    EXPECT_EQ(t->type, GgmlType::kF32) << name;
    int64_t n = 1;
    for (int64_t d : dims) {
      n *= d;
    }
    EXPECT_EQ(t->num_elements, n) << name;
    EXPECT_EQ(t->num_bytes, 4 * n) << name;
    EXPECT_EQ(t->offset % 32, 0u) << name;
    EXPECT_LE(f->data_offset() + t->offset + t->num_bytes, file_size) << name;
  };
  expect_tensor("token_embd.weight", {64, 512});
  expect_tensor("output_norm.weight", {64});
  expect_tensor("output.weight", {64, 512});
  for (int l = 0; l < 5; ++l) {
    const std::string p = absl::StrCat("blk.", l, ".");
    expect_tensor(p + "attn_q.weight", {64, 64});
    expect_tensor(p + "attn_k.weight", {64, 32});
    expect_tensor(p + "attn_v.weight", {64, 32});
    expect_tensor(p + "attn_output.weight", {64, 64});
    expect_tensor(p + "attn_norm.weight", {64});
    expect_tensor(p + "ffn_gate.weight", {64, 172});
    expect_tensor(p + "ffn_up.weight", {64, 172});
    expect_tensor(p + "ffn_down.weight", {172, 64});
    expect_tensor(p + "ffn_norm.weight", {64});
  }
  EXPECT_EQ(f->FindTensor("blk.5.attn_q.weight"), nullptr);
  // llama2.c ties the classifier to the embedding: the bytes are identical.
  const GgufTensorInfo* embd = f->FindTensor("token_embd.weight");
  const GgufTensorInfo* out = f->FindTensor("output.weight");
  EXPECT_EQ(std::memcmp(embd->data, out->data, embd->num_bytes), 0);

  // FromBuffer parses the same image the same way.
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> g, Parse(ReadBytes(path)));
  EXPECT_EQ(g->metadata_keys(), f->metadata_keys());
  ASSERT_EQ(g->tensors().size(), f->tensors().size());
  for (size_t i = 0; i < f->tensors().size(); ++i) {
    EXPECT_EQ(g->tensors()[i].name, f->tensors()[i].name);
    EXPECT_EQ(g->tensors()[i].offset, f->tensors()[i].offset);
  }
}

TEST(GgufRealFileTest, VocabOnlyFiles) {
  struct Case {
    std::string file;
    size_t n_kv;
    std::string model;
    size_t n_tokens;
  };
  for (const Case& c : {Case{"ggml-vocab-llama-spm.gguf", 22, "llama", 32000},
                        Case{"ggml-vocab-gpt-2.gguf", 16, "gpt2", 50257},
                        Case{"ggml-vocab-bert-bge.gguf", 20, "bert", 30522}}) {
    SCOPED_TRACE(c.file);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f,
                         GgufFile::Open(RequireSharedFile("models/ggml-vocab/" + c.file)));
    EXPECT_THAT(f->version(), AnyOf(2u, 3u));
    EXPECT_TRUE(f->tensors().empty());
    EXPECT_EQ(f->metadata().size(), c.n_kv);
    EXPECT_EQ(*f->GetString("tokenizer.ggml.model"), c.model);
    ASSERT_OK_AND_ASSIGN(std::vector<std::string> tokens,
                         f->GetStringArray("tokenizer.ggml.tokens"));
    EXPECT_EQ(tokens.size(), c.n_tokens);
  }
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<GgufFile> gpt2,
      GgufFile::Open(RequireSharedFile("models/ggml-vocab/ggml-vocab-gpt-2.gguf")));
  ASSERT_OK_AND_ASSIGN(std::vector<std::string> merges,
                       gpt2->GetStringArray("tokenizer.ggml.merges"));
  EXPECT_EQ(merges.size(), 50000u);
  EXPECT_EQ(*gpt2->GetInt("tokenizer.ggml.bos_token_id"), 50256);
}

TEST(GgufRealFileTest, OpenErrors) {
  EXPECT_THAT(GgufFile::Open(TempDir() + "/does-not-exist.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("does-not-exist.gguf")));
  EXPECT_THAT(GgufFile::Open(TempDir()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a regular file")));
  const std::string empty = TempDir() + "/empty.gguf";
  std::ofstream(empty).close();
  EXPECT_THAT(
      GgufFile::Open(empty),
      StatusIs(absl::StatusCode::kDataLoss, AllOf(HasSubstr("empty.gguf"), HasSubstr("0 bytes"))));
}

// ---------------------------------------------------------------------------
// Bad input

// A writer-made file with every metadata kind and every tensor type.
std::vector<uint8_t> SampleFile() {
  std::mt19937 rng(11);
  GgufWriter w;
  for (const auto& [k, v] : AllValueKinds()) {
    w.SetValue(k, v);
  }
  w.SetStringArray("tokenizer.ggml.tokens", {"<unk>", "<s>", "</s>", "hello", "world"});
  EXPECT_OK(w.AddTensorFromF32("a.weight", GgmlType::kF32, {8, 2}, RandomRow(rng, 16, 1)));
  EXPECT_OK(w.AddTensorFromF32("b.weight", GgmlType::kQ8_0, {64, 2}, RandomRow(rng, 128, 1)));
  EXPECT_OK(w.AddTensorFromF32("c.weight", GgmlType::kQ4_0, {32, 2}, RandomRow(rng, 64, 1)));
  EXPECT_OK(w.AddTensorFromF32("d.weight", GgmlType::kF16, {5}, RandomRow(rng, 5, 1)));
  EXPECT_OK(w.AddTensorFromF32("e.weight", GgmlType::kBF16, {3, 1, 1, 2}, RandomRow(rng, 6, 1)));
  absl::StatusOr<std::vector<uint8_t>> bytes = w.Serialize();
  EXPECT_OK(bytes.status());
  return bytes.ok() ? *bytes : std::vector<uint8_t>();
}

// End of the last byte any tensor needs: every shorter prefix must fail.
uint64_t DataEnd(const GgufFile& f) {
  uint64_t end = f.data_offset();
  for (const GgufTensorInfo& t : f.tensors()) {
    end = std::max<uint64_t>(end, f.data_offset() + t.offset + t.num_bytes);
  }
  return end;
}

// Cuts at every byte below `dense_until`, then every `header_stride` bytes up
// to the data section and every `data_stride` bytes in it.
void ExpectEveryTruncationFails(const std::vector<uint8_t>& bytes, uint64_t dense_until,
                                uint64_t header_stride, uint64_t data_stride) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> whole, Parse(bytes));
  const uint64_t end = DataEnd(*whole);
  ASSERT_LE(end, bytes.size());
  int checked = 0;
  for (uint64_t cut = 0; cut < end; cut += cut < dense_until            ? 1
                                           : cut < whole->data_offset() ? header_stride
                                                                        : data_stride) {
    std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + cut);
    absl::StatusOr<std::unique_ptr<GgufFile>> f = Parse(prefix);
    ASSERT_THAT(f, StatusIs(absl::StatusCode::kDataLoss, HasSubstr("offset")))
        << "truncated at " << cut << " of " << bytes.size();
    ++checked;
  }
  // The last byte matters too.
  std::vector<uint8_t> prefix(bytes.begin(), bytes.begin() + end - 1);
  EXPECT_THAT(Parse(prefix), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("past end of file")));
  EXPECT_GT(checked, 0);
}

TEST(GgufBadInputTest, EveryTruncationOfStoriesFails) {
  const std::vector<uint8_t> bytes = ReadBytes(RequireSharedFile(kStories));
  ASSERT_FALSE(bytes.empty());
  ExpectEveryTruncationFails(bytes, 2048, 61, 4099);
}

TEST(GgufBadInputTest, EveryTruncationOfWriterFileFails) {
  const std::vector<uint8_t> bytes = SampleFile();
  ExpectEveryTruncationFails(bytes, bytes.size(), 1, 1);
}

TEST(GgufBadInputTest, TruncationMessagesNameTheField) {
  const std::vector<uint8_t> bytes = ReadBytes(RequireSharedFile(kStories));
  auto cut = [&](size_t n) {
    return Parse(std::vector<uint8_t>(bytes.begin(), bytes.begin() + n));
  };
  EXPECT_THAT(cut(0), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("file is 0 bytes")));
  EXPECT_THAT(cut(6), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("version at offset 4")));
  EXPECT_THAT(cut(20), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("n_kv at offset 16")));
  // n_kv = 19 needs more than the 6 bytes left.
  EXPECT_THAT(cut(30), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("n_kv 19 at offset 16")));
  // Inside the token array (key 0, tokenizer.ggml.tokens).
  EXPECT_THAT(cut(2000), StatusIs(absl::StatusCode::kDataLoss,
                                  AllOf(HasSubstr("metadata key 0 ('tokenizer.ggml.tokens')"),
                                        HasSubstr("array length 512 at offset"))));
  // In the data section: the message names the tensor and its byte range.
  EXPECT_THAT(cut(20000), StatusIs(absl::StatusCode::kDataLoss,
                                   AllOf(HasSubstr("('token_embd.weight')"),
                                         HasSubstr("data range [14176, 145248)"),
                                         HasSubstr("past end of file (20000 bytes)"))));
}

TEST(GgufBadInputTest, WrongMagic) {
  std::vector<uint8_t> bytes = SampleFile();
  std::memcpy(bytes.data(), "GGML", 4);
  EXPECT_THAT(Parse(bytes), StatusIs(absl::StatusCode::kInvalidArgument,
                                     AllOf(HasSubstr("magic"), HasSubstr("offset 0"))));
}

TEST(GgufBadInputTest, UnsupportedVersions) {
  EXPECT_THAT(Parse(Raw().Header(1, 0, 0).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("version 1"), HasSubstr("offset 4"))));
  EXPECT_THAT(Parse(Raw().Header(4, 0, 0).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("version 4")));
  EXPECT_THAT(Parse(Raw().Header(0x03000000, 0, 0).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("big-endian")));
  EXPECT_OK(Parse(Raw().Header(2, 0, 0).bytes()).status());
  EXPECT_OK(Parse(Raw().Header(3, 0, 0).bytes()).status());
}

TEST(GgufBadInputTest, HugeCounts) {
  EXPECT_THAT(Parse(Raw().Header(3, uint64_t{1} << 62, 0).Zeros(100).bytes()),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("n_tensors 4611686018427387904 at offset 8"),
                             HasSubstr("only 100 bytes left"))));
  EXPECT_THAT(
      Parse(Raw().Header(3, 0, kU64Max).Zeros(100).bytes()),
      StatusIs(absl::StatusCode::kDataLoss, HasSubstr("n_kv 18446744073709551615 at offset 16")));
  // Key string length.
  EXPECT_THAT(Parse(Raw().Header(3, 0, 1).U64(kU64Max).Zeros(20).bytes()),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("metadata key 0: key length 18446744073709551615 at offset 24 "
                                 "exceeds file size 52")));
  // Value string length.
  EXPECT_THAT(Parse(Raw().Header(3, 0, 1).Str("general.name").U32(8).U64(kU64Max).Zeros(8).bytes()),
              StatusIs(absl::StatusCode::kDataLoss,
                       AllOf(HasSubstr("metadata key 0 ('general.name')"),
                             HasSubstr("string value length 18446744073709551615 at offset 48"))));
  // Array length, for a 1-byte element type and for strings.
  for (uint32_t elem : {0u, 8u, 9u}) {
    EXPECT_THAT(
        Parse(Raw().Header(3, 0, 1).Str("k").U32(9).U32(elem).U64(kU64Max / 2).Zeros(64).bytes()),
        StatusIs(absl::StatusCode::kDataLoss,
                 AllOf(HasSubstr("metadata key 0 ('k')"),
                       HasSubstr("array length 9223372036854775807 at offset 41"))));
  }
  // Tensor name length.
  EXPECT_THAT(Parse(Raw().Header(3, 1, 0).U64(kU64Max).Zeros(40).bytes()),
              StatusIs(absl::StatusCode::kDataLoss,
                       HasSubstr("tensor 0: name length 18446744073709551615 at offset 24")));
}

TEST(GgufBadInputTest, CountLimits) {
  // Counts the bytes could hold but that no real file has.
  const uint64_t n = (uint64_t{1} << 20) + 1;
  EXPECT_THAT(Parse(Raw().Header(3, 0, n).Zeros(13 * n).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("n_kv 1048577 at offset 16 exceeds the limit of 1048576")));
  EXPECT_THAT(Parse(Raw().Header(3, n, 0).Zeros(32 * n).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("n_tensors 1048577 at offset 8 exceeds the limit of 1048576")));
}

TEST(GgufBadInputTest, ArrayElementLimit) {
  // 2^23 + 1 one-byte elements are present in the file but over the cap.
  const uint64_t n = (uint64_t{1} << 23) + 1;
  Raw r;
  r.Header(3, 0, 1).Str("big").U32(9).U32(0).U64(n).Zeros(n);
  EXPECT_THAT(Parse(r.bytes()), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("exceeds the limit of 8388608")));
}

TEST(GgufBadInputTest, BadValueTypes) {
  EXPECT_THAT(Parse(Raw().Header(3, 0, 1).Str("k").U32(13).Zeros(8).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metadata key 0 ('k'): value type 13 at offset 33")));
  EXPECT_THAT(Parse(Raw().Header(3, 0, 1).Str("k").U32(9).U32(77).U64(0).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("array element type 77 at offset 37")));
  // Arrays nested 20 deep.
  Raw deep;
  deep.Header(3, 0, 1).Str("k").U32(9);
  for (int i = 0; i < 20; ++i) {
    deep.U32(9).U64(1);
  }
  deep.U32(0).U64(0);
  EXPECT_THAT(Parse(deep.bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("deeper than 8 levels")));
}

TEST(GgufBadInputTest, DuplicateKey) {
  EXPECT_THAT(Parse(Raw().Header(3, 0, 2).KvU32("a", 1).KvU32("a", 2).bytes()),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("metadata key 1 ('a') at offset 41: duplicate key")));
}

TEST(GgufBadInputTest, BadAlignment) {
  for (uint32_t a : {0u, 3u, 96u}) {
    Raw r;
    r.Header(3, 0, 1).KvU32("general.alignment", a);
    EXPECT_THAT(Parse(r.bytes()),
                StatusIs(absl::StatusCode::kInvalidArgument,
                         AllOf(HasSubstr(absl::StrCat("general.alignment ", a)),
                               HasSubstr("not a power of two"), HasSubstr("offset 49"))));
  }
  Raw s;
  s.Header(3, 0, 1).Str("general.alignment").U32(8).Str("32");
  EXPECT_THAT(Parse(s.bytes()), StatusIs(absl::StatusCode::kInvalidArgument,
                                         HasSubstr("general.alignment is string")));
  // A valid non-default alignment is honoured.
  Raw ok;
  ok.Header(3, 1, 1).KvU32("general.alignment", 8).TensorInfo("t", {2}, 0, 0).PadTo(8).Zeros(8);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, Parse(ok.bytes()));
  EXPECT_EQ(f->alignment(), 8u);
  EXPECT_EQ(f->data_offset() % 8, 0u);
}

TEST(GgufBadInputTest, BadTensorInfos) {
  using ::absl::StatusCode;
  EXPECT_THAT(Parse(OneTensorFile("t", {1, 1, 1, 1, 1}, 0, 0, 4)),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("tensor 0 ('t'): n_dims 5 at offset 33 out of range [1, 4]")));
  EXPECT_THAT(Parse(OneTensorFile("t", {}, 0, 0, 4)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("n_dims 0")));
  EXPECT_THAT(Parse(OneTensorFile("t", {4, uint64_t{1} << 63}, 0, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("dimension 1 at offset 45 is -9223372036854775808, negative")));
  EXPECT_THAT(Parse(OneTensorFile("t", {uint64_t{1} << 32, uint64_t{1} << 32}, 0, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tensor 0 ('t')"), HasSubstr("overflows int64"),
                             HasSubstr("offset 37"))));
  // Elements fit int64 but bytes don't: 2^62 F32 values.
  EXPECT_THAT(Parse(OneTensorFile("t", {uint64_t{1} << 62}, 0, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("byte size")));
  EXPECT_THAT(Parse(OneTensorFile("weird", {4}, 99, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tensor 0 ('weird')"),
                             HasSubstr("unknown tensor type id 99"), HasSubstr("offset 49"))));
  EXPECT_THAT(Parse(OneTensorFile("q", {33}, 8, 0, 64)),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("row length 33 is not a multiple of the Q8_0 block size 32")));
  // K-quants: rows are whole 256-element super-blocks; a truncated super-block
  // is a data range past the end. Both name the tensor.
  EXPECT_THAT(Parse(OneTensorFile("blk.0.ffn_down.weight", {320, 2}, 12, 0, 512)),
              StatusIs(StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("tensor 0 ('blk.0.ffn_down.weight')"),
                             HasSubstr("row length 320 is not a multiple of the Q4_K block size "
                                       "256"))));
  EXPECT_THAT(Parse(OneTensorFile("output.weight", {256, 2}, 14, 0, 2 * 210 - 1)),
              StatusIs(StatusCode::kDataLoss, AllOf(HasSubstr("tensor 0 ('output.weight')"),
                                                    HasSubstr("data range [96, 516)"),
                                                    HasSubstr("past end of file (515 bytes)"))));
  EXPECT_THAT(Parse(OneTensorFile("q", {48}, 3, 0, 64)),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("row length 48 is not a multiple of the Q4_1 block size 32")));
  for (uint32_t id : {6u, 7u, 12u, 13u, 14u}) {
    // Well-formed tensors of each new type parse (one block or super-block).
    const int64_t n = id >= 12 ? 256 : 32;
    const int64_t bytes = GgmlRowBytes(static_cast<GgmlType>(id), n);
    ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f,
                         Parse(OneTensorFile("ok", {static_cast<uint64_t>(n)}, id, 0, bytes)));
    EXPECT_EQ(f->tensors()[0].num_bytes, bytes);
  }
  EXPECT_THAT(
      Parse(OneTensorFile("t", {4}, 0, 4, 64)),
      StatusIs(StatusCode::kInvalidArgument,
               HasSubstr("data offset 4 at offset 49 is not a multiple of the alignment 32")));
  EXPECT_THAT(Parse(OneTensorFile("t", {100}, 0, 0, 16)),
              StatusIs(StatusCode::kDataLoss,
                       HasSubstr("tensor 0 ('t'): data range [64, 464) (data section at offset 64 "
                                 "+ tensor offset 0) past end of file (80 bytes)")));
  EXPECT_THAT(Parse(OneTensorFile("t", {4}, 0, kU64Max - 31, 16)),
              StatusIs(StatusCode::kDataLoss, HasSubstr("overflows")));
  // Names from the file are escaped and cut short in messages.
  EXPECT_THAT(Parse(OneTensorFile("x\ny\x01", {4}, 99, 0, 16)),
              StatusIs(StatusCode::kInvalidArgument, HasSubstr("tensor 0 ('x\\ny\\x01')")));
  const std::string long_name = std::string(200, 'n');
  absl::Status long_status = Parse(OneTensorFile(long_name, {4}, 99, 0, 16)).status();
  EXPECT_THAT(long_status, StatusIs(StatusCode::kInvalidArgument, HasSubstr("n'...")));
  EXPECT_LT(long_status.message().size(), 300u);
  // Zero-sized tensors are fine, even at the very end.
  EXPECT_OK(Parse(OneTensorFile("t", {0, 7}, 0, 0, 0)).status());

  Raw dup;
  dup.Header(3, 2, 0).TensorInfo("x", {4}, 0, 0).TensorInfo("x", {4}, 0, 32).PadTo(32).Zeros(64);
  EXPECT_THAT(Parse(dup.bytes()),
              StatusIs(StatusCode::kInvalidArgument,
                       HasSubstr("tensor 1 ('x'): duplicate tensor name (also tensor 0)")));
}

// Random corruption of the header must give a clean status or a valid file,
// never a crash or an out-of-bounds read (the ASan build checks the latter).
void FuzzHeader(const std::vector<uint8_t>& original, uint32_t seed, int iterations) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> clean, Parse(original));
  const uint64_t header_end = clean->data_offset();
  std::mt19937 rng(seed);
  int failures = 0;
  for (int it = 0; it < iterations; ++it) {
    std::vector<uint8_t> bytes = original;
    const int mutations = 1 + rng() % 8;
    for (int m = 0; m < mutations; ++m) {
      const uint64_t pos = rng() % header_end;
      switch (rng() % 4) {
        case 0:
          bytes[pos] = static_cast<uint8_t>(rng());
          break;
        case 1:
          bytes[pos] ^= static_cast<uint8_t>(1u << (rng() % 8));
          break;
        case 2:
          bytes[pos] = 0xFF;
          break;
        default: {
          const uint64_t v = (uint64_t{rng()} << 32) | rng();
          std::memcpy(bytes.data() + pos, &v, std::min<uint64_t>(8, bytes.size() - pos));
        }
      }
    }
    if (rng() % 8 == 0) {
      bytes.resize(rng() % bytes.size());
    }
    absl::StatusOr<std::unique_ptr<GgufFile>> f = Parse(bytes);
    if (!f.ok()) {
      ++failures;
      ASSERT_THAT(f.status().code(),
                  AnyOf(absl::StatusCode::kInvalidArgument, absl::StatusCode::kDataLoss))
          << "seed " << seed << " iteration " << it << ": " << f.status();
      ASSERT_FALSE(f.status().message().empty());
      continue;
    }
    // Accepted: every tensor's data must really be inside the image.
    uint64_t sum = 0;
    for (const GgufTensorInfo& t : (*f)->tensors()) {
      for (int64_t b = 0; b < t.num_bytes; ++b) {
        sum += t.data[b];
      }
    }
    volatile uint64_t sink = sum;
    (void)sink;
  }
  EXPECT_GT(failures, 0) << "seed " << seed;
}

TEST(GgufFuzzTest, RandomHeaderMutationsOfWriterFile) { FuzzHeader(SampleFile(), 20240611, 2000); }

TEST(GgufFuzzTest, RandomHeaderMutationsOfStories) {
  // Only the header region is mutated; a 1.2 MB copy per iteration bounds the count.
  FuzzHeader(ReadBytes(RequireSharedFile(kStories)), 7, 300);
}

}  // namespace
}  // namespace tandem::engine::testing
