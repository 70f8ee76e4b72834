#pragma once
// Helpers shared by the GGUF tests (gguf_reader_test, gguf_writer_test,
// gguf_quantize_test, ggml_type_test): test files, random rows, and metadata
// values of every kind with a deep comparison.

#include <cstdint>
#include <fstream>
#include <iterator>
#include <limits>
#include <memory>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/str_cat.h"
#include "common/engine/format/gguf.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

// The GGUF tests are in this namespace too: they use these helpers, and the
// matchers they all need, unqualified.
namespace tandem::engine::testing {

using ::tandem::testing::StatusIs;
using ::tandem::testing::TempDir;
using ::testing::HasSubstr;

inline constexpr char kStories[] = "models/stories260K/stories260K.gguf";
inline constexpr uint64_t kU64Max = std::numeric_limits<uint64_t>::max();

inline std::vector<uint8_t> ReadBytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::vector<uint8_t>(std::istreambuf_iterator<char>(in), {});
}

inline absl::StatusOr<std::unique_ptr<GgufFile>> Parse(const std::vector<uint8_t>& bytes) {
  return GgufFile::FromBuffer(bytes);
}

inline std::vector<float> RandomRow(std::mt19937& rng, int64_t n, float scale) {
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> x(n);
  for (float& v : x) {
    v = normal(rng);
  }
  return x;
}

inline GgufValue Scalar(GgufValueType type, int64_t i = 0, double f = 0, std::string s = "") {
  GgufValue v;
  v.type = type;
  v.i = i;
  v.f = f;
  v.str = std::move(s);
  return v;
}

inline GgufValue Array(GgufValueType elem, std::vector<GgufValue> elems) {
  GgufValue v;
  v.type = GgufValueType::kArray;
  v.array_type = elem;
  v.array = std::move(elems);
  return v;
}

inline void ExpectSameValue(const GgufValue& got, const GgufValue& want, const std::string& where) {
  ASSERT_EQ(got.type, want.type) << where;
  switch (want.type) {
    case GgufValueType::kUint64:
      EXPECT_EQ(got.u, want.u) << where;
      break;
    case GgufValueType::kFloat32:
      EXPECT_EQ(got.f, static_cast<float>(want.f)) << where;
      break;
    case GgufValueType::kFloat64:
      EXPECT_EQ(got.f, want.f) << where;
      break;
    case GgufValueType::kString:
      EXPECT_EQ(got.str, want.str) << where;
      break;
    case GgufValueType::kBool:
      EXPECT_EQ(got.i != 0, want.i != 0) << where;
      break;
    case GgufValueType::kArray:
      ASSERT_EQ(got.array_type, want.array_type) << where;
      ASSERT_EQ(got.array.size(), want.array.size()) << where;
      for (size_t k = 0; k < want.array.size(); ++k) {
        ExpectSameValue(got.array[k], want.array[k], absl::StrCat(where, "[", k, "]"));
      }
      break;
    default:
      EXPECT_EQ(got.i, want.i) << where;
  }
}

// Every scalar type at its extremes, strings with NULs and UTF-8, arrays of
// each type, empty and nested arrays.
inline std::vector<std::pair<std::string, GgufValue>> AllValueKinds() {
  using T = GgufValueType;
  GgufValue u64max = Scalar(T::kUint64);
  u64max.u = kU64Max;
  GgufValue u64small = Scalar(T::kUint64);
  u64small.u = 42;
  u64small.i = 42;
  std::vector<std::pair<std::string, GgufValue>> kv = {
      {"t.u8", Scalar(T::kUint8, 255)},
      {"t.i8", Scalar(T::kInt8, -128)},
      {"t.u16", Scalar(T::kUint16, 65535)},
      {"t.i16", Scalar(T::kInt16, -32768)},
      {"t.u32", Scalar(T::kUint32, 4294967295)},
      {"t.i32", Scalar(T::kInt32, std::numeric_limits<int32_t>::min())},
      {"t.u64", u64max},
      {"t.u64small", u64small},
      {"t.i64", Scalar(T::kInt64, std::numeric_limits<int64_t>::min())},
      {"t.f32", Scalar(T::kFloat32, 0, 1.5)},
      {"t.f64", Scalar(T::kFloat64, 0, -2.25e300)},
      {"t.true", Scalar(T::kBool, 1)},
      {"t.false", Scalar(T::kBool, 0)},
      {"t.str", Scalar(T::kString, 0, 0, std::string("a\0b \xC3\xA9\xF0\x9F\x98\x80", 10))},
      {"t.empty_str", Scalar(T::kString)},
      {"", Scalar(T::kUint8, 7)},  // empty key is legal
      {"a.u8", Array(T::kUint8, {Scalar(T::kUint8, 0), Scalar(T::kUint8, 255)})},
      {"a.i8", Array(T::kInt8, {Scalar(T::kInt8, -1)})},
      {"a.u16", Array(T::kUint16, {Scalar(T::kUint16, 1), Scalar(T::kUint16, 2)})},
      {"a.i16", Array(T::kInt16, {Scalar(T::kInt16, -300)})},
      {"a.u32", Array(T::kUint32, {Scalar(T::kUint32, 70000)})},
      {"a.i32", Array(T::kInt32, {Scalar(T::kInt32, -5), Scalar(T::kInt32, 6)})},
      {"a.u64", Array(T::kUint64, {u64max, u64small})},
      {"a.i64", Array(T::kInt64, {Scalar(T::kInt64, -(int64_t{1} << 40))})},
      {"a.f32", Array(T::kFloat32, {Scalar(T::kFloat32, 0, 0.25), Scalar(T::kFloat32, 0, -1)})},
      {"a.f64", Array(T::kFloat64, {Scalar(T::kFloat64, 0, 1e-300)})},
      {"a.bool", Array(T::kBool, {Scalar(T::kBool, 1), Scalar(T::kBool, 0)})},
      {"a.str", Array(T::kString, {Scalar(T::kString, 0, 0, "x"), Scalar(T::kString),
                                   Scalar(T::kString, 0, 0, "<0xFF>")})},
      {"a.empty", Array(T::kFloat32, {})},
      {"a.nested",
       Array(T::kArray, {Array(T::kInt32, {Scalar(T::kInt32, 1), Scalar(T::kInt32, 2)}),
                         Array(T::kInt32, {}), Array(T::kInt32, {Scalar(T::kInt32, 3)})})},
      {"a.nested_str", Array(T::kArray, {Array(T::kString, {Scalar(T::kString, 0, 0, "deep")}),
                                         Array(T::kString, {})})},
      {"a.nested3",
       Array(T::kArray, {Array(T::kArray, {Array(T::kUint8, {Scalar(T::kUint8, 9)})})})},
  };
  return kv;
}

}  // namespace tandem::engine::testing
