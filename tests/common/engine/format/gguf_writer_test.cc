// Tests for the GGUF writer (common/engine/format/gguf_writer.cc): every
// metadata kind and tensor type round trips through the reader.

#include <cstdint>
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

using ::testing::AllOf;
using ::testing::ElementsAre;

TEST(GgufWriterTest, RoundTripsEveryMetadataType) {
  GgufWriter w;
  const auto kv = AllValueKinds();
  for (const auto& [k, v] : kv) {
    w.SetValue(k, v);
  }
  w.SetString("s.string", "hello");
  w.SetUint32("s.u32", 7);
  w.SetInt32("s.i32", -7);
  w.SetUint64("s.u64", uint64_t{1} << 63);
  w.SetFloat32("s.f32", 0.1f);
  w.SetBool("s.bool", true);
  w.SetStringArray("s.strs", {"a", "", "ccc"});
  w.SetFloat32Array("s.floats", {1.0f, -2.5f});
  w.SetInt32Array("s.ints", {-1, 0, 1});
  w.SetUint32("s.u32", 8);  // replaces in place, keeps the first position
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> bytes, w.Serialize());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, Parse(bytes));
  EXPECT_EQ(f->version(), 3u);
  EXPECT_TRUE(f->tensors().empty());

  std::vector<std::string> want_keys;
  for (const auto& [k, v] : kv) {
    want_keys.push_back(k);
  }
  for (const char* k :
       {"s.string", "s.u32", "s.i32", "s.u64", "s.f32", "s.bool", "s.strs", "s.floats", "s.ints"}) {
    want_keys.push_back(k);
  }
  EXPECT_EQ(f->metadata_keys(), want_keys);
  for (const auto& [k, v] : kv) {
    const GgufValue* got = f->Find(k);
    ASSERT_NE(got, nullptr) << k;
    ExpectSameValue(*got, v, k);
  }

  EXPECT_EQ(*f->GetString("s.string"), "hello");
  EXPECT_EQ(*f->GetInt("s.u32"), 8);
  EXPECT_EQ(*f->GetInt("s.i32"), -7);
  EXPECT_EQ(*f->GetInt("t.u32"), 4294967295);
  EXPECT_EQ(*f->GetInt("t.i64"), std::numeric_limits<int64_t>::min());
  EXPECT_EQ(*f->GetInt("t.u64small"), 42);
  EXPECT_EQ(f->Find("s.u64")->u, uint64_t{1} << 63);
  EXPECT_THAT(f->GetInt("s.u64"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("does not fit int64")));
  EXPECT_EQ(*f->GetFloat("s.f32"), 0.1f);
  EXPECT_EQ(*f->GetFloat("t.f64"), -2.25e300);
  EXPECT_EQ(*f->GetFloat("t.i16"), -32768.0);
  EXPECT_TRUE(*f->GetBool("s.bool"));
  EXPECT_FALSE(*f->GetBool("t.false"));
  EXPECT_THAT(*f->GetStringArray("s.strs"), ElementsAre("a", "", "ccc"));
  EXPECT_THAT(*f->GetFloatArray("s.floats"), ElementsAre(1.0, -2.5));
  EXPECT_THAT(*f->GetFloatArray("a.i32"), ElementsAre(-5.0, 6.0));
  EXPECT_THAT(*f->GetIntArray("s.ints"), ElementsAre(-1, 0, 1));
  EXPECT_THAT(*f->GetIntArray("a.u16"), ElementsAre(1, 2));
  EXPECT_THAT(f->GetIntArray("a.u64"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("element 0")));
  EXPECT_THAT(f->GetIntArray("s.floats"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array<float32>")));
  EXPECT_THAT(f->GetStringArray("a.nested"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array<array>")));
  EXPECT_THAT(*f->GetFloatArray("a.empty"), ::testing::IsEmpty());
  EXPECT_THAT(f->GetIntArray("a.empty"),  // the element type decides, even when empty
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("array<float32>")));

  // Writing what was read gives the same bytes (SetValue copies everything).
  GgufWriter copy;
  for (const std::string& k : f->metadata_keys()) {
    copy.SetValue(k, *f->Find(k));
  }
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> again, copy.Serialize());
  EXPECT_EQ(again, bytes);
}

TEST(GgufWriterTest, RoundTripsAllTensorTypes) {
  std::mt19937 rng(3);
  GgufWriter w;
  w.SetString("general.architecture", "test");
  w.SetAlignment(64);
  struct Spec {
    std::string name;
    GgmlType type;
    std::vector<int64_t> dims;
  };
  const std::vector<Spec> specs = {
      {"f32", GgmlType::kF32, {4, 3}},          {"f16", GgmlType::kF16, {7}},
      {"bf16", GgmlType::kBF16, {2, 2, 2}},     {"q8_0", GgmlType::kQ8_0, {64, 2}},
      {"q4_0", GgmlType::kQ4_0, {32, 3, 1, 2}}, {"empty", GgmlType::kF32, {0, 5}},
  };
  std::vector<std::vector<float>> values;
  for (const Spec& s : specs) {
    int64_t n = 1;
    for (int64_t d : s.dims) {
      n *= d;
    }
    values.push_back(RandomRow(rng, n, 2.0f));
    ASSERT_OK(w.AddTensorFromF32(s.name, s.type, s.dims, values.back()));
  }
  std::vector<uint8_t> raw = {1, 2, 3, 4, 5, 6, 7, 8};
  ASSERT_OK(w.AddTensor("raw.f16", GgmlType::kF16, {2, 2}, raw));

  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> bytes, w.Serialize());
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, Parse(bytes));
  EXPECT_EQ(f->alignment(), 64u);
  EXPECT_EQ(*f->GetInt("general.alignment"), 64);
  EXPECT_EQ(f->data_offset() % 64, 0u);
  ASSERT_EQ(f->tensors().size(), specs.size() + 1);
  for (size_t i = 0; i < specs.size(); ++i) {
    const GgufTensorInfo& t = f->tensors()[i];
    SCOPED_TRACE(t.name);
    EXPECT_EQ(t.name, specs[i].name);
    EXPECT_EQ(t.type, specs[i].type);
    EXPECT_EQ(t.dims, specs[i].dims);
    EXPECT_EQ(t.offset % 64, 0u);
    EXPECT_EQ(t.num_elements, static_cast<int64_t>(values[i].size()));
    EXPECT_EQ(t.num_bytes,
              GgmlRowBytes(t.type, t.dims[0]) * (t.dims[0] ? t.num_elements / t.dims[0] : 0));
    EXPECT_EQ(f->FindTensor(specs[i].name), &t);
    // Data equals QuantizeRow of the input.
    std::vector<uint8_t> want(t.num_bytes);
    if (t.dims[0] > 0) {
      for (int64_t r = 0; r < t.num_elements / t.dims[0]; ++r) {
        QuantizeRow(t.type, values[i].data() + r * t.dims[0],
                    want.data() + r * GgmlRowBytes(t.type, t.dims[0]), t.dims[0]);
      }
    }
    EXPECT_EQ(std::vector<uint8_t>(t.data, t.data + t.num_bytes), want);
  }
  const GgufTensorInfo* r = f->FindTensor("raw.f16");
  ASSERT_NE(r, nullptr);
  EXPECT_EQ(std::vector<uint8_t>(r->data, r->data + r->num_bytes), raw);
  // Tensors are laid out back to back, each padded to the alignment.
  EXPECT_EQ(f->tensors()[0].offset, 0u);
  EXPECT_EQ(f->tensors()[1].offset, 64u);  // 48 bytes of F32 padded to 64
  EXPECT_EQ(bytes.size() % 64, 0u);

  // WriteFile streams the same bytes.
  const std::string path = TempDir() + "/all_types.gguf";
  ASSERT_OK(w.WriteFile(path));
  EXPECT_EQ(ReadBytes(path), bytes);
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> opened, GgufFile::Open(path));
  EXPECT_EQ(opened->tensors().size(), specs.size() + 1);
}

TEST(GgufWriterTest, EmptyFile) {
  GgufWriter w;
  ASSERT_OK_AND_ASSIGN(std::vector<uint8_t> bytes, w.Serialize());
  EXPECT_EQ(bytes.size(), 32u);  // 24-byte header padded to 32
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<GgufFile> f, Parse(bytes));
  EXPECT_TRUE(f->metadata().empty());
  EXPECT_TRUE(f->tensors().empty());
  EXPECT_EQ(f->data_offset(), 32u);
  // A file with no tensor data may end right after the header.
  bytes.resize(24);
  EXPECT_OK(Parse(bytes).status());
}

TEST(GgufWriterTest, RejectsBadInput) {
  GgufWriter w;
  const std::vector<float> f32(64, 1.0f);
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {4}, std::vector<uint8_t>(15)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("needs 16 bytes, got 15")));
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {1, 1, 1, 1, 1}, std::vector<uint8_t>(4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n_dims 5")));
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("n_dims 0")));
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {-1}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("negative")));
  EXPECT_THAT(w.AddTensor("t", GgmlType::kF32, {int64_t{1} << 40, int64_t{1} << 40}, {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overflows")));
  EXPECT_THAT(w.AddTensorFromF32("t", GgmlType::kQ8_0, {16, 4}, f32),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       HasSubstr("row length 16 is not a multiple of the Q8_0 block size 32")));
  EXPECT_THAT(w.AddTensorFromF32("t", GgmlType::kF32, {65}, f32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("hold 65 elements, got 64")));
  EXPECT_THAT(w.AddTensor("", GgmlType::kF32, {1}, std::vector<uint8_t>(4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("tensor name")));
  EXPECT_THAT(w.AddTensor(std::string(64, 'x'), GgmlType::kF32, {1}, std::vector<uint8_t>(4)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("64 bytes")));
  ASSERT_OK(w.AddTensorFromF32("t", GgmlType::kF32, {64}, f32));
  EXPECT_THAT(w.AddTensorFromF32("t", GgmlType::kF32, {64}, f32),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("duplicate tensor name 't'")));

  for (uint32_t a : {0u, 3u, 48u}) {
    GgufWriter bad;
    bad.SetAlignment(a);
    EXPECT_THAT(bad.Serialize(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr(absl::StrCat("general.alignment ", a))));
  }
  GgufWriter bad_alignment_type;
  bad_alignment_type.SetString("general.alignment", "32");
  EXPECT_THAT(bad_alignment_type.Serialize(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not an integer")));

  GgufWriter mixed;
  mixed.SetValue("k", Array(GgufValueType::kInt32,
                            {Scalar(GgufValueType::kInt32, 1), Scalar(GgufValueType::kString)}));
  EXPECT_THAT(mixed.Serialize(),
              StatusIs(absl::StatusCode::kInvalidArgument,
                       AllOf(HasSubstr("'k'"), HasSubstr("array element 1 is string"))));
  GgufWriter range;
  range.SetValue("k", Scalar(GgufValueType::kUint8, 300));
  EXPECT_THAT(range.Serialize(), StatusIs(absl::StatusCode::kInvalidArgument,
                                          HasSubstr("value 300 out of range for uint8")));
  EXPECT_THAT(range.WriteFile(TempDir() + "/never.gguf"),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("300")));
  GgufWriter ok;
  EXPECT_THAT(ok.WriteFile(TempDir() + "/no/such/dir/x.gguf"),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("x.gguf")));
}

}  // namespace
}  // namespace tandem::engine::testing
