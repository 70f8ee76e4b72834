#include "kvtransfer/kv_layout.h"

#include <cstdint>
#include <vector>

#include "common/engine/format/ggml_type.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::kvtransfer {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::AllOf;
using ::testing::HasSubstr;

KvLayout TinyLlama() {
  return KvLayout{.num_layers = 22,
                  .num_kv_heads = 4,
                  .head_dim = 64,
                  .block_size = 16,
                  .dtype = engine::GgmlType::kF16,
                  .model_id = 0xabc};
}

TEST(KvLayoutTest, BlockBytes) {
  EXPECT_EQ(TinyLlama().block_bytes(), 16 * 4 * 64 * 2);  // 8 KiB
  KvLayout f32 = TinyLlama();
  f32.dtype = engine::GgmlType::kF32;
  EXPECT_EQ(f32.block_bytes(), 16 * 4 * 64 * 4);
}

TEST(KvLayoutTest, ToString) {
  EXPECT_EQ(TinyLlama().ToString(),
            "layers=22 kv_heads=4 head_dim=64 block=16 dtype=F16 model=0xabc");
}

TEST(KvLayoutTest, Validate) {
  EXPECT_OK(TinyLlama().Validate());
  KvLayout l = TinyLlama();
  l.num_layers = 0;
  EXPECT_THAT(l.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_layers")));
  l = TinyLlama();
  l.num_kv_heads = -1;
  EXPECT_THAT(l.Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_kv_heads")));
  l = TinyLlama();
  l.head_dim = 0;
  EXPECT_THAT(l.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("head_dim")));
  l = TinyLlama();
  l.block_size = 0;
  EXPECT_THAT(l.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block_size")));
  l = TinyLlama();
  l.dtype = engine::GgmlType::kQ8_0;
  EXPECT_THAT(l.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("Q8_0")));
  EXPECT_EQ(l.block_bytes(), 0);
}

TEST(KvLayoutTest, CheckLayoutsMatchNamesBoth) {
  EXPECT_OK(CheckLayoutsMatch(TinyLlama(), TinyLlama()));
  KvLayout other = TinyLlama();
  other.head_dim = 128;
  other.model_id = 7;
  EXPECT_THAT(CheckLayoutsMatch(TinyLlama(), other),
              StatusIs(absl::StatusCode::kFailedPrecondition,
                       AllOf(HasSubstr(TinyLlama().ToString()), HasSubstr(other.ToString()))));
}

TEST(PoolGeometryTest, OffsetsAndSize) {
  const PoolGeometry g{.layout = TinyLlama(), .num_blocks = 100};
  const int64_t bb = 8192;
  EXPECT_EQ(g.pool_bytes(), 22 * 2 * 100 * bb);
  EXPECT_EQ(g.Offset(0, 0, 0), 0);
  EXPECT_EQ(g.Offset(0, 0, 1), bb);
  EXPECT_EQ(g.Offset(0, 1, 0), 100 * bb);               // V of layer 0 follows its K
  EXPECT_EQ(g.Offset(1, 0, 0), 200 * bb);               // layer 1 follows layer 0's V
  EXPECT_EQ(g.Offset(21, 1, 99), g.pool_bytes() - bb);  // the last block
  EXPECT_EQ(g.Offset(3, 1, 7), ((3 * 2 + 1) * 100 + 7) * bb);
}

TEST(PoolGeometryTest, Validate) {
  EXPECT_OK((PoolGeometry{.layout = TinyLlama(), .num_blocks = 1}).Validate());
  EXPECT_THAT((PoolGeometry{.layout = TinyLlama(), .num_blocks = 0}).Validate(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_blocks")));
}

class CoalesceRunsTest : public ::testing::Test {
 protected:
  const PoolGeometry local_{.layout = TinyLlama(), .num_blocks = 32};
  const PoolGeometry remote_{.layout = TinyLlama(), .num_blocks = 64};
  std::vector<uint8_t> pool_ = std::vector<uint8_t>(8);  // only its address is used
  const uint8_t* base() const { return pool_.data(); }
  static constexpr uint64_t kBlock = 8192;
};

TEST_F(CoalesceRunsTest, ConsecutiveOnBothSidesBecomeOneOp) {
  ASSERT_OK_AND_ASSIGN(
      std::vector<WriteOp> ops,
      CoalesceRuns(local_, base(), remote_, /*layer=*/2, /*kv=*/1, {3, 4, 5, 9}, {10, 11, 12, 20}));
  ASSERT_EQ(ops.size(), 2u);
  EXPECT_EQ(ops[0].src, base() + local_.Offset(2, 1, 3));
  EXPECT_EQ(ops[0].remote_offset, static_cast<uint64_t>(remote_.Offset(2, 1, 10)));
  EXPECT_EQ(ops[0].bytes, 3 * kBlock);
  EXPECT_EQ(ops[1].src, base() + local_.Offset(2, 1, 9));
  EXPECT_EQ(ops[1].remote_offset, static_cast<uint64_t>(remote_.Offset(2, 1, 20)));
  EXPECT_EQ(ops[1].bytes, kBlock);
}

TEST_F(CoalesceRunsTest, DifferingRemoteIdsBreakRuns) {
  ASSERT_OK_AND_ASSIGN(std::vector<WriteOp> ops,
                       CoalesceRuns(local_, base(), remote_, 0, 0, {3, 4, 5, 9}, {10, 11, 13, 14}));
  // 3,4 -> 10,11 | 5 -> 13 | 9 -> 14 (local 5 -> 9 is not consecutive).
  ASSERT_EQ(ops.size(), 3u);
  EXPECT_EQ(ops[0].bytes, 2 * kBlock);
  EXPECT_EQ(ops[1].remote_offset, static_cast<uint64_t>(remote_.Offset(0, 0, 13)));
  EXPECT_EQ(ops[1].bytes, kBlock);
  EXPECT_EQ(ops[2].src, base() + local_.Offset(0, 0, 9));
  EXPECT_EQ(ops[2].bytes, kBlock);
}

TEST_F(CoalesceRunsTest, DescendingIdsAreNotARun) {
  ASSERT_OK_AND_ASSIGN(std::vector<WriteOp> ops,
                       CoalesceRuns(local_, base(), remote_, 0, 0, {5, 4}, {1, 0}));
  EXPECT_EQ(ops.size(), 2u);
}

TEST_F(CoalesceRunsTest, AllContiguousIsOneOp) {
  std::vector<int32_t> ids(32);
  for (int i = 0; i < 32; ++i) {
    ids[i] = i;
  }
  std::vector<int32_t> remote_ids(32);
  for (int i = 0; i < 32; ++i) {
    remote_ids[i] = 32 + i;
  }
  ASSERT_OK_AND_ASSIGN(std::vector<WriteOp> ops,
                       CoalesceRuns(local_, base(), remote_, 21, 0, ids, remote_ids));
  ASSERT_EQ(ops.size(), 1u);
  EXPECT_EQ(ops[0].bytes, 32 * kBlock);
}

TEST_F(CoalesceRunsTest, EmptyGivesNoOps) {
  ASSERT_OK_AND_ASSIGN(std::vector<WriteOp> ops,
                       CoalesceRuns(local_, base(), remote_, 0, 0, {}, {}));
  EXPECT_TRUE(ops.empty());
}

TEST_F(CoalesceRunsTest, RejectsBadInput) {
  EXPECT_THAT(CoalesceRuns(local_, base(), remote_, 0, 0, {1, 2}, {1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("2 local block ids")));
  EXPECT_THAT(CoalesceRuns(local_, base(), remote_, 0, 0, {32}, {1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("local block id 32")));
  EXPECT_THAT(CoalesceRuns(local_, base(), remote_, 0, 0, {1}, {64}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("remote block id 64")));
  EXPECT_THAT(CoalesceRuns(local_, base(), remote_, 22, 0, {1}, {1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("layer 22")));
  EXPECT_THAT(CoalesceRuns(local_, base(), remote_, 0, 2, {1}, {1}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("kv must be 0 or 1")));
  PoolGeometry other = remote_;
  other.layout.num_kv_heads = 8;
  EXPECT_THAT(CoalesceRuns(local_, base(), other, 0, 0, {1}, {1}),
              StatusIs(absl::StatusCode::kFailedPrecondition, HasSubstr("kv_heads=8")));
}

}  // namespace
}  // namespace tandem::kvtransfer
