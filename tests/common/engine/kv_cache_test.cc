// Tests for the paged KV block manager and its prefix cache. Every test ends
// with the pool drained (no used blocks); the stress test replays from the
// seed printed in its failure message.

#include "common/engine/kv_cache.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <set>
#include <vector>

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::engine {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::AllOf;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

// Tokens first, first+1, ..., first+n-1.
std::vector<int32_t> Iota(int32_t n, int32_t first = 0) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

std::vector<int32_t> Concat(std::vector<int32_t> a, const std::vector<int32_t>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

std::vector<BlockId> Table(const KvCacheManager& kv, SequenceId seq) {
  absl::Span<const BlockId> t = kv.block_table(seq);
  return std::vector<BlockId>(t.begin(), t.end());
}

class KvCacheTest : public ::testing::Test {
 protected:
  KvCacheManager& Init(int32_t num_blocks, int32_t block_size = 16, bool prefix_cache = true,
                       uint64_t model_id = 7) {
    KvCacheConfig config;
    config.num_blocks = num_blocks;
    config.block_size = block_size;
    config.enable_prefix_cache = prefix_cache;
    config.model_id = model_id;
    kv_ = std::make_unique<KvCacheManager>(config);
    return *kv_;
  }

  // The engine's prefill of a new sequence: add, reserve the prompt, commit it.
  int32_t AddAndPrefill(SequenceId seq, const std::vector<int32_t>& prompt) {
    absl::StatusOr<int32_t> cached = kv_->AddSequence(seq, prompt);
    EXPECT_OK(cached.status());
    std::vector<BlockCopy> copies;
    EXPECT_OK(kv_->Reserve(seq, static_cast<int32_t>(prompt.size()), &copies));
    EXPECT_TRUE(copies.empty());
    EXPECT_OK(kv_->Commit(seq, prompt));
    return cached.value_or(-1);
  }

  // Computes prompts[i] as sequence i + 1, then frees them in that order: all
  // cached, in LRU order (prompts[0] the oldest).
  void CacheInLruOrder(const std::vector<std::vector<int32_t>>& prompts) {
    for (size_t i = 0; i < prompts.size(); ++i) {
      AddAndPrefill(static_cast<SequenceId>(i + 1), prompts[i]);
    }
    for (size_t i = 0; i < prompts.size(); ++i) {
      ASSERT_OK(kv_->Free(static_cast<SequenceId>(i + 1)));
    }
  }

  // Every test frees its sequences: the pool must be back to zero used blocks.
  void TearDown() override {
    if (kv_ == nullptr) {
      return;
    }
    const KvCacheStats st = kv_->stats();
    EXPECT_EQ(st.used_blocks, 0) << "a test leaked blocks";
    EXPECT_EQ(st.free_blocks, st.num_blocks);
    for (BlockId b = 0; b < st.num_blocks; ++b) {
      EXPECT_EQ(kv_->ref_count(b), 0) << "block " << b;
    }
  }

  std::unique_ptr<KvCacheManager> kv_;
};

TEST(KvCacheConfigTest, ValidateNamesTheField) {
  KvCacheConfig c;
  c.num_blocks = 4;
  EXPECT_OK(c.Validate());
  c.block_size = 0;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("block_size")));
  c.block_size = 16;
  c.num_blocks = -1;
  EXPECT_THAT(c.Validate(), StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("num_blocks")));
}

TEST(KvCacheConfigDeathTest, ConstructorChecksConfig) {
  KvCacheConfig c;
  c.num_blocks = 4;
  c.block_size = 0;
  EXPECT_DEATH(KvCacheManager{c}, "block_size");
}

TEST_F(KvCacheTest, AllocateFreeReturnsToBaseline) {
  struct Case {
    int32_t num_tokens;
    int32_t blocks;
  };
  const Case cases[] = {{0, 0}, {1, 1}, {15, 1}, {16, 1}, {17, 2}, {160, 10}};
  KvCacheManager& kv = Init(/*num_blocks=*/10, /*block_size=*/16, /*prefix_cache=*/false);
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("num_tokens=", c.num_tokens));
    ASSERT_OK(kv.AddSequence(1, {}).status());
    std::vector<BlockCopy> copies;
    ASSERT_OK(kv.Reserve(1, c.num_tokens, &copies));
    EXPECT_EQ(kv.BlocksNeeded(c.num_tokens), c.blocks);
    EXPECT_EQ(kv.block_table(1).size(), static_cast<size_t>(c.blocks));
    EXPECT_EQ(kv.num_used_blocks(), c.blocks);
    EXPECT_EQ(kv.num_free_blocks(), 10 - c.blocks);
    for (BlockId b : kv.block_table(1)) {
      EXPECT_EQ(kv.ref_count(b), 1);
    }
    ASSERT_OK(kv.Free(1));
    EXPECT_FALSE(kv.HasSequence(1));
    EXPECT_EQ(kv.num_used_blocks(), 0);
    EXPECT_EQ(kv.num_free_blocks(), 10);
    EXPECT_EQ(kv.num_cached_blocks(), 0);
  }
}

TEST_F(KvCacheTest, BlockTableGrowsAcrossBlockBoundaries) {
  // Reserve steps on one sequence: total tokens -> table length. Reserve never shrinks.
  struct Step {
    int32_t num_tokens;
    size_t table_len;
  };
  const Step steps[] = {{1, 1}, {16, 1}, {17, 2}, {32, 2}, {33, 3}, {20, 3}, {100, 7}};
  KvCacheManager& kv = Init(/*num_blocks=*/8, /*block_size=*/16);
  ASSERT_OK(kv.AddSequence(3, {}).status());
  std::vector<BlockId> previous;
  for (const Step& s : steps) {
    SCOPED_TRACE(absl::StrCat("num_tokens=", s.num_tokens));
    std::vector<BlockCopy> copies;
    ASSERT_OK(kv.Reserve(3, s.num_tokens, &copies));
    EXPECT_TRUE(copies.empty());
    std::vector<BlockId> table = Table(kv, 3);
    ASSERT_EQ(table.size(), s.table_len);
    // Growth appends; existing entries never move.
    EXPECT_TRUE(std::equal(previous.begin(), previous.end(), table.begin()));
    std::vector<BlockId> sorted = table;
    std::sort(sorted.begin(), sorted.end());
    EXPECT_EQ(std::adjacent_find(sorted.begin(), sorted.end()), sorted.end()) << "duplicate block";
    previous = table;
  }
  EXPECT_EQ(kv.num_free_blocks(), 1);
  ASSERT_OK(kv.Free(3));
}

TEST_F(KvCacheTest, ResourceExhaustedLeavesStateUnchanged) {
  KvCacheManager& kv = Init(/*num_blocks=*/4, /*block_size=*/16);
  ASSERT_OK(kv.AddSequence(11, {}).status());
  ASSERT_OK(kv.AddSequence(12, {}).status());
  std::vector<BlockCopy> copies;
  ASSERT_OK(kv.Reserve(11, 40, &copies));  // 3 blocks, 1 left
  const std::vector<BlockId> table11 = Table(kv, 11);
  const KvCacheStats before = kv.stats();

  EXPECT_THAT(kv.Reserve(12, 33, &copies),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("sequence 12"), HasSubstr("needs 3"), HasSubstr("1 free"))));
  EXPECT_THAT(kv.Reserve(11, 80, &copies),
              StatusIs(absl::StatusCode::kResourceExhausted,
                       AllOf(HasSubstr("sequence 11"), HasSubstr("needs 2"))));
  EXPECT_TRUE(copies.empty());
  EXPECT_TRUE(kv.block_table(12).empty());
  EXPECT_EQ(Table(kv, 11), table11);
  const KvCacheStats after = kv.stats();
  EXPECT_EQ(after.free_blocks, before.free_blocks);
  EXPECT_EQ(after.used_blocks, before.used_blocks);
  EXPECT_EQ(after.evictions, before.evictions);

  // What does fit still succeeds afterwards.
  ASSERT_OK(kv.Reserve(12, 16, &copies));
  EXPECT_EQ(kv.num_free_blocks(), 0);
  ASSERT_OK(kv.Free(11));
  ASSERT_OK(kv.Free(12));
}

TEST_F(KvCacheTest, ErrorsNameTheSequence) {
  KvCacheManager& kv = Init(/*num_blocks=*/4, /*block_size=*/4);
  std::vector<BlockCopy> copies;
  EXPECT_THAT(kv.Reserve(42, 1, &copies),
              StatusIs(absl::StatusCode::kNotFound, HasSubstr("sequence 42")));
  EXPECT_THAT(kv.Commit(42, Iota(1)), StatusIs(absl::StatusCode::kNotFound, HasSubstr("42")));
  EXPECT_THAT(kv.Free(42), StatusIs(absl::StatusCode::kNotFound, HasSubstr("42")));
  EXPECT_THAT(kv.Fork(42, 43), StatusIs(absl::StatusCode::kNotFound, HasSubstr("42")));

  ASSERT_OK(kv.AddSequence(5, Iota(3)).status());
  EXPECT_THAT(kv.AddSequence(5, Iota(3)).status(),
              StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("sequence 5")));
  ASSERT_OK(kv.AddSequence(6, {}).status());
  EXPECT_THAT(kv.Fork(5, 6), StatusIs(absl::StatusCode::kAlreadyExists, HasSubstr("6")));
  EXPECT_THAT(kv.Reserve(5, -1, &copies),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sequence 5")));
  // Committing more than was reserved, or less than before.
  EXPECT_THAT(kv.Commit(5, Iota(3)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sequence 5")));
  ASSERT_OK(kv.Reserve(5, 3, &copies));
  ASSERT_OK(kv.Commit(5, Iota(3)));
  EXPECT_EQ(kv.num_tokens(5), 3);
  EXPECT_THAT(kv.Commit(5, Iota(2)),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sequence 5")));
  EXPECT_EQ(kv.num_tokens(5), 3);
  ASSERT_OK(kv.Free(5));
  ASSERT_OK(kv.Free(6));
}

TEST_F(KvCacheTest, ForkSharesBlocksAndCopiesSharedPartialBlockOnWrite) {
  KvCacheManager& kv = Init(/*num_blocks=*/8, /*block_size=*/16);
  const std::vector<int32_t> prompt = Iota(20);  // 1 full block + 4 tokens
  AddAndPrefill(1, prompt);
  ASSERT_OK(kv.Fork(1, 2));
  const std::vector<BlockId> shared = Table(kv, 1);
  ASSERT_EQ(shared.size(), 2u);
  EXPECT_EQ(Table(kv, 2), shared);
  EXPECT_EQ(kv.num_tokens(2), 20);
  EXPECT_EQ(kv.ref_count(shared[0]), 2);
  EXPECT_EQ(kv.ref_count(shared[1]), 2);
  EXPECT_EQ(kv.num_used_blocks(), 2);

  // The child writes token 20 into the shared partial block: exactly one copy.
  std::vector<BlockCopy> copies;
  ASSERT_OK(kv.Reserve(2, 21, &copies));
  ASSERT_EQ(copies.size(), 1u);
  EXPECT_EQ(copies[0].src, shared[1]);
  EXPECT_NE(copies[0].dst, shared[1]);
  EXPECT_THAT(Table(kv, 2), ElementsAre(shared[0], copies[0].dst));
  EXPECT_EQ(Table(kv, 1), shared);  // the parent is untouched
  EXPECT_EQ(kv.ref_count(shared[0]), 2);
  EXPECT_EQ(kv.ref_count(shared[1]), 1);
  EXPECT_EQ(kv.ref_count(copies[0].dst), 1);

  // Once private, neither sequence copies again.
  copies.clear();
  ASSERT_OK(kv.Reserve(2, 22, &copies));
  ASSERT_OK(kv.Reserve(1, 21, &copies));
  EXPECT_TRUE(copies.empty());
  ASSERT_OK(kv.Free(1));
  ASSERT_OK(kv.Free(2));
}

TEST_F(KvCacheTest, ForkCopyOnWriteCases) {
  // Fork after `committed` tokens (block 4), then the parent or the child
  // reserves `reserve_to`: how many copies does it take?
  struct Case {
    const char* name;
    int32_t committed;
    bool child_writes;
    int32_t reserve_to;
    int32_t copies;
  };
  const Case cases[] = {
      {"partial block, child writes", 6, true, 7, 1},
      {"partial block, parent writes", 6, false, 7, 1},
      {"partial block, no new token", 6, true, 6, 0},
      {"block boundary: fresh block", 8, true, 9, 0},
      {"partial block, grows past it", 6, true, 13, 1},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    KvCacheManager& kv = Init(/*num_blocks=*/16, /*block_size=*/4);
    AddAndPrefill(1, Iota(c.committed));
    ASSERT_OK(kv.Fork(1, 2));
    const SequenceId writer = c.child_writes ? 2 : 1;
    const SequenceId other = c.child_writes ? 1 : 2;
    const std::vector<BlockId> other_before = Table(kv, other);
    std::vector<BlockCopy> copies;
    ASSERT_OK(kv.Reserve(writer, c.reserve_to, &copies));
    EXPECT_EQ(static_cast<int32_t>(copies.size()), c.copies);
    EXPECT_EQ(Table(kv, other), other_before);
    EXPECT_EQ(static_cast<int32_t>(kv.block_table(writer).size()), kv.BlocksNeeded(c.reserve_to));
    ASSERT_OK(kv.Free(1));
    ASSERT_OK(kv.Free(2));
    TearDown();
  }
}

TEST_F(KvCacheTest, ForkSharesOnlyCommittedBlocks) {
  KvCacheManager& kv = Init(/*num_blocks=*/8, /*block_size=*/4);
  AddAndPrefill(1, Iota(5));
  std::vector<BlockCopy> copies;
  ASSERT_OK(kv.Reserve(1, 12, &copies));  // 3 blocks, 2 of them hold committed tokens
  ASSERT_OK(kv.Fork(1, 2));
  EXPECT_EQ(kv.block_table(2).size(), 2u);
  EXPECT_EQ(kv.ref_count(kv.block_table(1)[2]), 1);
  ASSERT_OK(kv.Free(1));
  ASSERT_OK(kv.Free(2));
}

TEST_F(KvCacheTest, ReserveWithoutCopyListFailsWhenACopyIsNeeded) {
  KvCacheManager& kv = Init(/*num_blocks=*/8, /*block_size=*/4);
  AddAndPrefill(1, Iota(6));
  ASSERT_OK(kv.Fork(1, 2));
  EXPECT_THAT(kv.Reserve(2, 7, nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("sequence 2")));
  EXPECT_EQ(kv.num_used_blocks(), 2);
  ASSERT_OK(kv.Reserve(2, 6, nullptr));  // nothing to write, nothing to copy
  ASSERT_OK(kv.Free(1));
  ASSERT_OK(kv.Free(2));
}

TEST_F(KvCacheTest, CopyOnWriteCountsTowardsAllOrNothing) {
  KvCacheManager& kv = Init(/*num_blocks=*/2, /*block_size=*/4);
  AddAndPrefill(1, Iota(6));  // both blocks
  ASSERT_OK(kv.Fork(1, 2));
  std::vector<BlockCopy> copies;
  EXPECT_THAT(kv.Reserve(2, 7, &copies),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("needs 1")));
  EXPECT_TRUE(copies.empty());
  EXPECT_EQ(kv.ref_count(kv.block_table(1)[1]), 2);
  ASSERT_OK(kv.Free(1));
  ASSERT_OK(kv.Free(2));
}

TEST_F(KvCacheTest, PrefixCacheSharesCommonPrefix) {
  KvCacheManager& kv = Init(/*num_blocks=*/16, /*block_size=*/16);
  const std::vector<int32_t> common = Iota(40, 1000);
  const std::vector<int32_t> a = Concat(common, Iota(10, 1));
  const std::vector<int32_t> b = Concat(common, Iota(7, 500));
  EXPECT_EQ(AddAndPrefill(1, a), 0);
  EXPECT_EQ(kv.LongestCachedPrefix(b), 32);
  EXPECT_EQ(kv.LongestCachedPrefix(common), 32);
  EXPECT_EQ(kv.LongestCachedPrefix(Iota(40, 2000)), 0);

  ASSERT_OK_AND_ASSIGN(int32_t cached, kv.AddSequence(2, b));
  EXPECT_EQ(cached, 32);
  EXPECT_EQ(kv.num_tokens(2), 32);
  const std::vector<BlockId> ta = Table(kv, 1);
  EXPECT_THAT(Table(kv, 2), ElementsAre(ta[0], ta[1]));
  EXPECT_EQ(kv.ref_count(ta[0]), 2);
  EXPECT_EQ(kv.ref_count(ta[1]), 2);
  EXPECT_EQ(kv.ref_count(ta[2]), 1);

  // The rest of b is computed into fresh blocks.
  std::vector<BlockCopy> copies;
  ASSERT_OK(kv.Reserve(2, static_cast<int32_t>(b.size()), &copies));
  EXPECT_TRUE(copies.empty());
  ASSERT_OK(kv.Commit(2, b));
  ASSERT_EQ(kv.block_table(2).size(), 3u);
  EXPECT_NE(kv.block_table(2)[2], ta[2]);

  const KvCacheStats st = kv.stats();
  EXPECT_EQ(st.prefix_queries_tokens, static_cast<int64_t>(a.size() + b.size()));
  EXPECT_EQ(st.prefix_hits_tokens, 32);
  ASSERT_OK(kv.Free(1));
  ASSERT_OK(kv.Free(2));
  // Named blocks outlive their sequences as evictable cache.
  EXPECT_EQ(kv.num_cached_blocks(), 3);  // a's 3 full blocks (b's own third is partial)
  EXPECT_EQ(kv.LongestCachedPrefix(a), 48);
}

TEST_F(KvCacheTest, LeavesOnePromptTokenToCompute) {
  // Cache holds the 4 full blocks of Iota(64). A prompt that is a prefix of it
  // attaches at most (len - 1) / 16 blocks.
  struct Case {
    int32_t prompt_len;
    int32_t attached;
  };
  const Case cases[] = {{1, 0}, {15, 0}, {16, 0}, {17, 16}, {31, 16}, {32, 16},
                        {33, 32}, {48, 32}, {64, 48}};
  KvCacheManager& kv = Init(/*num_blocks=*/16, /*block_size=*/16);
  AddAndPrefill(1, Iota(64));
  ASSERT_OK(kv.Free(1));
  for (const Case& c : cases) {
    SCOPED_TRACE(absl::StrCat("prompt_len=", c.prompt_len));
    const std::vector<int32_t> prompt = Iota(c.prompt_len);
    EXPECT_EQ(kv.LongestCachedPrefix(prompt), c.prompt_len / 16 * 16);
    ASSERT_OK_AND_ASSIGN(int32_t cached, kv.AddSequence(2, prompt));
    EXPECT_EQ(cached, c.attached);
    EXPECT_EQ(kv.block_table(2).size(), static_cast<size_t>(c.attached / 16));
    ASSERT_OK(kv.Free(2));
  }
}

TEST(ChainBlockHashTest, NamesAreStable) {
  // Names are promised stable across builds and processes (a router may
  // compute them): changing the hash is a protocol change, not a refactor.
  EXPECT_EQ(ModelSeedHash(0), 0x8ee9dc9e0b7cb8a6ULL);
  EXPECT_EQ(ChainBlockHash(ModelSeedHash(0), Iota(16)), 0x50a56d3aabd0927bULL);
}

TEST_F(KvCacheTest, HashChainsOverThePrefixAndTheModel) {
  const std::vector<int32_t> block = Iota(16, 5);
  const BlockHash seed = ModelSeedHash(1);
  EXPECT_EQ(ChainBlockHash(seed, block), ChainBlockHash(seed, block));
  EXPECT_NE(ModelSeedHash(1), ModelSeedHash(2));
  EXPECT_NE(ChainBlockHash(seed, block), ChainBlockHash(ModelSeedHash(2), block));
  const BlockHash after_x = ChainBlockHash(ChainBlockHash(seed, Iota(16, 100)), block);
  const BlockHash after_y = ChainBlockHash(ChainBlockHash(seed, Iota(16, 200)), block);
  EXPECT_NE(after_x, after_y);
  // Order and length matter.
  std::vector<int32_t> swapped = block;
  std::swap(swapped[0], swapped[1]);
  EXPECT_NE(ChainBlockHash(seed, block), ChainBlockHash(seed, swapped));
  EXPECT_NE(ChainBlockHash(seed, Iota(3)), ChainBlockHash(seed, Iota(4)));
  EXPECT_NE(ChainBlockHash(seed, {0}), ChainBlockHash(seed, {}));

  // Same second block after different first blocks: no hit on the second.
  KvCacheManager& kv = Init(/*num_blocks=*/8, /*block_size=*/16, true, /*model_id=*/1);
  AddAndPrefill(1, Concat(Iota(16, 100), block));
  ASSERT_OK(kv.Free(1));
  EXPECT_EQ(kv.LongestCachedPrefix(Concat(Iota(16, 100), block)), 32);
  EXPECT_EQ(kv.LongestCachedPrefix(Concat(Iota(16, 200), block)), 0);
  ASSERT_OK_AND_ASSIGN(int32_t cached, kv.AddSequence(2, Concat(Iota(16, 200), Concat(block, {1}))));
  EXPECT_EQ(cached, 0);
  ASSERT_OK(kv.Free(2));

  // A manager keeps one model id, so "another model never hits" is a
  // property of the names: under model 2 the chain starts elsewhere.
  EXPECT_NE(ChainBlockHash(ModelSeedHash(1), Iota(16, 100)),
            ChainBlockHash(ModelSeedHash(2), Iota(16, 100)));
}

TEST_F(KvCacheTest, PrefixCacheDisabled) {
  KvCacheManager& kv = Init(/*num_blocks=*/8, /*block_size=*/16, /*prefix_cache=*/false);
  AddAndPrefill(1, Iota(40));
  ASSERT_OK(kv.Free(1));
  EXPECT_EQ(kv.num_cached_blocks(), 0);
  EXPECT_EQ(kv.LongestCachedPrefix(Iota(40)), 0);
  EXPECT_EQ(AddAndPrefill(2, Iota(40)), 0);
  ASSERT_OK(kv.Free(2));
  EXPECT_EQ(kv.stats().prefix_queries_tokens, 0);
}

TEST_F(KvCacheTest, DuplicateBlockKeepsTheExistingName) {
  KvCacheManager& kv = Init(/*num_blocks=*/8, /*block_size=*/4);
  // Both computed concurrently (no hit for the second: the first had not
  // committed yet), so two blocks hold the same tokens.
  ASSERT_OK(kv.AddSequence(1, Iota(5)).status());
  ASSERT_OK(kv.AddSequence(2, Iota(5)).status());
  std::vector<BlockCopy> copies;
  ASSERT_OK(kv.Reserve(1, 5, &copies));
  ASSERT_OK(kv.Reserve(2, 5, &copies));
  ASSERT_OK(kv.Commit(1, Iota(5)));
  ASSERT_OK(kv.Commit(2, Iota(5)));
  const BlockId first = kv.block_table(1)[0];
  const BlockId dup = kv.block_table(2)[0];
  ASSERT_NE(first, dup);
  ASSERT_OK(kv.Free(1));
  ASSERT_OK(kv.Free(2));
  // Only the first stays cached; the duplicate went back to the free list.
  EXPECT_EQ(kv.num_cached_blocks(), 1);
  ASSERT_OK(kv.AddSequence(3, Iota(5)).status());
  EXPECT_THAT(Table(kv, 3), ElementsAre(first));
  ASSERT_OK(kv.Free(3));
}

TEST_F(KvCacheTest, LruEvictsOnlyUnderPressureOldestFirst) {
  KvCacheManager& kv = Init(/*num_blocks=*/4, /*block_size=*/4);
  // Three one-block sequences (4 tokens: one full, named block each), freed in
  // order 1, 2, 3: their blocks enter the LRU list in that order.
  const std::vector<int32_t> p1 = Iota(4, 100), p2 = Iota(4, 200), p3 = Iota(4, 300);
  ASSERT_NO_FATAL_FAILURE(CacheInLruOrder({p1, p2, p3}));
  EXPECT_EQ(kv.num_cached_blocks(), 3);
  EXPECT_EQ(kv.num_free_blocks(), 4);  // cached blocks count as free
  EXPECT_EQ(kv.num_used_blocks(), 0);

  // While the free list lasts nothing is evicted; then each block evicts the
  // oldest cached one: p1's, then p2's.
  struct Step {
    int32_t tokens;
    int64_t evictions;
    bool p1_cached, p2_cached, p3_cached;
  };
  const Step steps[] = {{4, 0, true, true, true},
                        {8, 1, false, true, true},
                        {12, 2, false, false, true},
                        {16, 3, false, false, false}};
  ASSERT_OK(kv.AddSequence(9, {}).status());
  for (const Step& s : steps) {
    SCOPED_TRACE(absl::StrCat("tokens=", s.tokens));
    std::vector<BlockCopy> copies;
    ASSERT_OK(kv.Reserve(9, s.tokens, &copies));
    EXPECT_EQ(kv.stats().evictions, s.evictions);
    EXPECT_EQ(kv.num_cached_blocks(), 3 - s.evictions);
    EXPECT_EQ(kv.LongestCachedPrefix(p1) > 0, s.p1_cached);
    EXPECT_EQ(kv.LongestCachedPrefix(p2) > 0, s.p2_cached);
    EXPECT_EQ(kv.LongestCachedPrefix(p3) > 0, s.p3_cached);
  }
  ASSERT_OK(kv.Free(9));
  // An evicted name is gone from the map: computing p1 again caches it again.
  AddAndPrefill(10, p1);
  ASSERT_OK(kv.Free(10));
  EXPECT_EQ(kv.LongestCachedPrefix(p1), 4);
  ASSERT_OK_AND_ASSIGN(int32_t cached, kv.AddSequence(11, Concat(p1, {1})));
  EXPECT_EQ(cached, 4);
  ASSERT_OK(kv.Free(11));
}

TEST_F(KvCacheTest, HitRemovesBlockFromLru) {
  KvCacheManager& kv = Init(/*num_blocks=*/3, /*block_size=*/4);
  const std::vector<int32_t> p1 = Iota(4, 100), p2 = Iota(4, 200);
  ASSERT_NO_FATAL_FAILURE(CacheInLruOrder({p1, p2}));  // LRU: p1, p2
  ASSERT_EQ(kv.num_cached_blocks(), 2);

  // A hit on p1 takes its block out of the LRU list: used, not evictable.
  ASSERT_OK_AND_ASSIGN(int32_t cached, kv.AddSequence(3, Concat(p1, {7})));
  EXPECT_EQ(cached, 4);
  EXPECT_EQ(kv.num_cached_blocks(), 1);
  EXPECT_EQ(kv.num_used_blocks(), 1);
  EXPECT_EQ(kv.num_free_blocks(), 2);
  // Under pressure only p2's block can go, although p1's is older.
  ASSERT_OK(kv.AddSequence(4, {}).status());
  std::vector<BlockCopy> copies;
  ASSERT_OK(kv.Reserve(4, 8, &copies));
  EXPECT_EQ(kv.stats().evictions, 1);
  EXPECT_EQ(kv.LongestCachedPrefix(p2), 0);
  EXPECT_EQ(kv.LongestCachedPrefix(p1), 4);
  EXPECT_THAT(kv.Reserve(4, 12, &copies),
              StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("0 free")));
  ASSERT_OK(kv.Free(4));
  ASSERT_OK(kv.Free(3));
}

TEST_F(KvCacheTest, HitRefreshesLruPosition) {
  KvCacheManager& kv = Init(/*num_blocks=*/3, /*block_size=*/4);
  const std::vector<int32_t> p1 = Iota(4, 100), p2 = Iota(4, 200);
  ASSERT_NO_FATAL_FAILURE(CacheInLruOrder({p1, p2}));      // LRU: p1, p2
  ASSERT_OK(kv.AddSequence(3, Concat(p1, {7})).status());  // hit p1
  ASSERT_OK(kv.Free(3));                                    // LRU: p2, p1
  ASSERT_OK(kv.AddSequence(4, {}).status());
  std::vector<BlockCopy> copies;
  ASSERT_OK(kv.Reserve(4, 8, &copies));  // the free block + the oldest cached
  EXPECT_EQ(kv.stats().evictions, 1);
  EXPECT_EQ(kv.LongestCachedPrefix(p2), 0);
  EXPECT_EQ(kv.LongestCachedPrefix(p1), 4);
  ASSERT_OK(kv.Free(4));
}

TEST_F(KvCacheTest, FreeReleasesTailFirst) {
  // A chain's tail enters the LRU list before its head, so pressure drops the
  // tail first and the shared head stays reusable.
  KvCacheManager& kv = Init(/*num_blocks=*/3, /*block_size=*/4);
  const std::vector<int32_t> p = Iota(9);  // two full blocks
  AddAndPrefill(1, p);
  ASSERT_OK(kv.Free(1));
  ASSERT_OK(kv.AddSequence(2, {}).status());
  std::vector<BlockCopy> copies;
  ASSERT_OK(kv.Reserve(2, 8, &copies));  // the free block + one eviction
  EXPECT_EQ(kv.stats().evictions, 1);
  EXPECT_EQ(kv.LongestCachedPrefix(p), 4);
  ASSERT_OK(kv.Free(2));
}

TEST_F(KvCacheTest, ClearPrefixCacheDropsOnlyUnreferencedBlocks) {
  KvCacheManager& kv = Init(/*num_blocks=*/8, /*block_size=*/4);
  AddAndPrefill(1, Iota(9, 0));
  AddAndPrefill(2, Iota(9, 50));
  ASSERT_OK(kv.Free(1));
  ASSERT_EQ(kv.num_cached_blocks(), 2);
  kv.ClearPrefixCache();
  EXPECT_EQ(kv.num_cached_blocks(), 0);
  EXPECT_EQ(kv.num_free_blocks(), 5);
  EXPECT_EQ(kv.LongestCachedPrefix(Iota(9, 0)), 0);
  EXPECT_EQ(kv.LongestCachedPrefix(Iota(9, 50)), 8);  // in use: still named
  EXPECT_EQ(kv.stats().evictions, 0);
  ASSERT_OK(kv.Free(2));
}

// Random add / reserve / commit / fork / free against a shadow of the KV
// bytes: each block's slots hold the token written there, as the engine
// would. Checks after every step that each live sequence reads back its own
// tokens (so attach, copy-on-write and eviction never hand out wrong KV), that
// writes only land in unshared blocks, and the pool's accounting.
TEST_F(KvCacheTest, RandomizedStress) {
  constexpr int32_t kBlockSize = 4;
  constexpr int32_t kNumBlocks = 48;
  for (uint64_t seed : {1u, 2u, 3u, 4u}) {
    SCOPED_TRACE(absl::StrCat("seed=", seed));
    std::mt19937_64 rng(seed);
    auto uniform = [&rng](int64_t lo, int64_t hi) {  // inclusive, portable
      return lo + static_cast<int64_t>(rng() % static_cast<uint64_t>(hi - lo + 1));
    };
    KvCacheManager& kv = Init(kNumBlocks, kBlockSize, /*prefix_cache=*/true);
    std::vector<std::vector<int32_t>> shadow(kNumBlocks, std::vector<int32_t>(kBlockSize, -1));
    std::map<SequenceId, std::vector<int32_t>> live;  // committed tokens
    SequenceId next_id = 0;
    int64_t num_copies = 0, num_exhausted = 0, num_forks = 0;
    // Prompts share a few prefixes so the cache gets hits.
    std::vector<std::vector<int32_t>> families;
    for (int f = 0; f < 4; ++f) {
      std::vector<int32_t> fam(24);
      for (int32_t& t : fam) {
        t = static_cast<int32_t>(uniform(0, 50));
      }
      families.push_back(fam);
    }

    auto write = [&](SequenceId id, const std::vector<int32_t>& tokens, int32_t from) {
      absl::Span<const BlockId> table = kv.block_table(id);
      for (size_t pos = from; pos < tokens.size(); ++pos) {
        const BlockId b = table[pos / kBlockSize];
        ASSERT_EQ(kv.ref_count(b), 1) << "write into shared block " << b << " by seq " << id;
        shadow[b][pos % kBlockSize] = tokens[pos];
      }
    };
    auto check = [&]() {
      const KvCacheStats st = kv.stats();
      ASSERT_EQ(st.free_blocks + st.used_blocks, kNumBlocks);
      ASSERT_LE(st.cached_blocks, st.free_blocks);
      std::vector<int32_t> refs(kNumBlocks, 0);
      for (const auto& [id, tokens] : live) {
        absl::Span<const BlockId> table = kv.block_table(id);
        ASSERT_EQ(kv.num_tokens(id), static_cast<int32_t>(tokens.size()));
        ASSERT_GE(static_cast<int32_t>(table.size()), kv.BlocksNeeded(tokens.size()));
        for (BlockId b : table) {
          ++refs[b];
        }
        for (size_t pos = 0; pos < tokens.size(); ++pos) {
          ASSERT_EQ(shadow[table[pos / kBlockSize]][pos % kBlockSize], tokens[pos])
              << "seq " << id << " position " << pos;
        }
      }
      int32_t used = 0;
      for (BlockId b = 0; b < kNumBlocks; ++b) {
        ASSERT_EQ(kv.ref_count(b), refs[b]) << "block " << b;
        used += refs[b] > 0;
      }
      ASSERT_EQ(used, st.used_blocks);
    };

    for (int step = 0; step < 3000; ++step) {
      SCOPED_TRACE(absl::StrCat("step=", step));
      const int64_t op = uniform(0, 99);
      if (live.empty() || op < 20) {  // add + prefill
        std::vector<int32_t> prompt = families[uniform(0, families.size() - 1)];
        prompt.resize(uniform(1, 24));
        for (int64_t i = uniform(0, 8); i > 0; --i) {
          prompt.push_back(static_cast<int32_t>(uniform(0, 50)));
        }
        const SequenceId id = next_id++;
        ASSERT_OK_AND_ASSIGN(int32_t cached, kv.AddSequence(id, prompt));
        ASSERT_EQ(cached % kBlockSize, 0);
        ASSERT_LE(cached, (static_cast<int32_t>(prompt.size()) - 1) / kBlockSize * kBlockSize);
        live[id] = std::vector<int32_t>(prompt.begin(), prompt.begin() + cached);
        ASSERT_NO_FATAL_FAILURE(check());  // attached blocks hold the prompt's tokens
        std::vector<BlockCopy> copies;
        absl::Status s = kv.Reserve(id, static_cast<int32_t>(prompt.size()), &copies);
        if (absl::IsResourceExhausted(s)) {
          ASSERT_OK(kv.Free(id));
          live.erase(id);
        } else {
          ASSERT_OK(s);
          ASSERT_TRUE(copies.empty());
          ASSERT_NO_FATAL_FAILURE(write(id, prompt, cached));
          ASSERT_OK(kv.Commit(id, prompt));
          live[id] = prompt;
        }
      } else {
        auto it = live.begin();
        std::advance(it, uniform(0, live.size() - 1));
        const SequenceId id = it->first;
        if (op < 65) {  // decode a few tokens
          std::vector<int32_t> tokens = it->second;
          const int32_t from = static_cast<int32_t>(tokens.size());
          for (int64_t i = uniform(1, 6); i > 0; --i) {
            tokens.push_back(static_cast<int32_t>(uniform(0, 50)));
          }
          const std::vector<BlockId> table_before = Table(kv, id);
          const KvCacheStats before = kv.stats();
          std::vector<BlockCopy> copies;
          absl::Status s = kv.Reserve(id, static_cast<int32_t>(tokens.size()), &copies);
          if (absl::IsResourceExhausted(s)) {
            ASSERT_THAT(s.message(), HasSubstr(absl::StrCat("sequence ", id)));
            ASSERT_TRUE(copies.empty());
            ASSERT_EQ(Table(kv, id), table_before);
            ASSERT_EQ(kv.stats().free_blocks, before.free_blocks);
            ASSERT_EQ(kv.stats().evictions, before.evictions);
            ++num_exhausted;
          } else {
            ASSERT_OK(s);
            ASSERT_LE(copies.size(), 1u);
            for (const BlockCopy& c : copies) {
              shadow[c.dst] = shadow[c.src];
              ++num_copies;
            }
            ASSERT_NO_FATAL_FAILURE(write(id, tokens, from));
            ASSERT_OK(kv.Commit(id, tokens));
            it->second = tokens;
          }
        } else if (op < 80) {  // fork
          const SequenceId child = next_id++;
          ASSERT_OK(kv.Fork(id, child));
          live[child] = live[id];
          ++num_forks;
        } else if (op < 99) {
          ASSERT_OK(kv.Free(id));
          live.erase(it);
        } else {
          kv.ClearPrefixCache();
        }
      }
      ASSERT_NO_FATAL_FAILURE(check());
    }
    const KvCacheStats st = kv.stats();
    EXPECT_GT(st.prefix_hits_tokens, 0);
    EXPECT_GT(st.evictions, 0);
    EXPECT_GT(num_copies, 0);
    EXPECT_GT(num_exhausted, 0);
    EXPECT_GT(num_forks, 0);
    for (const auto& [id, tokens] : live) {
      ASSERT_OK(kv.Free(id));
    }
    live.clear();
    TearDown();
  }
}

// --- block events (what workers publish for the router's prefix index) ----

// The names of the full blocks of `tokens` as a router computes them.
std::vector<BlockHash> ChainNames(const std::vector<int32_t>& tokens, uint64_t model_id = 7,
                                  int32_t block_size = 16) {
  std::vector<BlockHash> out;
  BlockHash h = ModelSeedHash(model_id);
  for (size_t i = 0; i + block_size <= tokens.size(); i += block_size) {
    h = ChainBlockHash(h, absl::MakeConstSpan(tokens).subspan(i, block_size));
    out.push_back(h);
  }
  return out;
}

std::vector<BlockHash> Sorted(std::vector<BlockHash> v) {
  std::sort(v.begin(), v.end());
  return v;
}

TEST_F(KvCacheTest, BlockEventsAreOffByDefault) {
  KvCacheManager& kv = Init(/*num_blocks=*/4);
  AddAndPrefill(1, Iota(48));
  ASSERT_OK(kv.Free(1));
  EXPECT_TRUE(kv.DrainBlockEvents().empty());
  EXPECT_EQ(kv.CachedBlockHashes(), Sorted(ChainNames(Iota(48))));
}

TEST_F(KvCacheTest, BlockEventsFollowNamingAndEviction) {
  KvCacheManager& kv = Init(/*num_blocks=*/4);
  kv.EnableBlockEvents();
  KvBlockEvents first = kv.DrainBlockEvents();
  EXPECT_TRUE(first.resync);  // the set so far: empty
  EXPECT_TRUE(first.added.empty());

  const std::vector<int32_t> a = Iota(50);  // 3 full blocks, a partial one unnamed
  AddAndPrefill(1, a);
  KvBlockEvents ev = kv.DrainBlockEvents();
  EXPECT_FALSE(ev.resync);
  EXPECT_EQ(ev.added, Sorted(ChainNames(a)));
  EXPECT_TRUE(ev.removed.empty());
  EXPECT_TRUE(kv.DrainBlockEvents().empty());

  // Another prompt needs the whole pool: a's three cached blocks are evicted.
  ASSERT_OK(kv.Free(1));
  const std::vector<int32_t> b = Iota(64, 1000);
  AddAndPrefill(2, b);
  ev = kv.DrainBlockEvents();
  EXPECT_EQ(ev.added, Sorted(ChainNames(b)));
  EXPECT_EQ(ev.removed, Sorted(ChainNames(a)));
  EXPECT_EQ(kv.CachedBlockHashes(), Sorted(ChainNames(b)));
  ASSERT_OK(kv.Free(2));

  kv.ClearPrefixCache();
  ev = kv.DrainBlockEvents();
  EXPECT_TRUE(ev.added.empty());
  EXPECT_EQ(ev.removed, Sorted(ChainNames(b)));
}

TEST_F(KvCacheTest, BlockEventsReportTheLastChangeOfEachName) {
  KvCacheManager& kv = Init(/*num_blocks=*/4);
  kv.EnableBlockEvents();
  kv.DrainBlockEvents();
  const std::vector<int32_t> a = Iota(16);
  // Came and went between two drains: reported as removed only.
  AddAndPrefill(1, a);
  ASSERT_OK(kv.Free(1));
  kv.ClearPrefixCache();
  KvBlockEvents ev = kv.DrainBlockEvents();
  EXPECT_TRUE(ev.added.empty());
  EXPECT_EQ(ev.removed, ChainNames(a));
  // Went and came back: added only (a consumer applying both lists in any
  // order ends with the name present).
  AddAndPrefill(2, a);
  ASSERT_OK(kv.Free(2));
  kv.DrainBlockEvents();
  kv.ClearPrefixCache();
  AddAndPrefill(3, a);
  ev = kv.DrainBlockEvents();
  EXPECT_EQ(ev.added, ChainNames(a));
  EXPECT_TRUE(ev.removed.empty());
  ASSERT_OK(kv.Free(3));
}

TEST_F(KvCacheTest, BlockEventsOverflowTurnsIntoAResync) {
  KvCacheManager& kv = Init(/*num_blocks=*/8);
  kv.EnableBlockEvents(/*max_pending=*/2);
  kv.DrainBlockEvents();
  const std::vector<int32_t> a = Iota(48);  // 3 names > 2
  AddAndPrefill(1, a);
  KvBlockEvents ev = kv.DrainBlockEvents();
  EXPECT_TRUE(ev.resync);
  EXPECT_EQ(ev.added, Sorted(ChainNames(a)));
  EXPECT_TRUE(ev.removed.empty());
  EXPECT_TRUE(kv.DrainBlockEvents().empty());
  ASSERT_OK(kv.Free(1));
}

// A consumer that applies every drain (replacing its set on a resync) holds
// exactly the cache's names after each one, whatever the interleaving.
TEST_F(KvCacheTest, BlockEventsKeepAConsumerInStep) {
  const uint32_t seed = 20261202;
  std::mt19937 rng(seed);
  KvCacheManager& kv = Init(/*num_blocks=*/24, /*block_size=*/4);
  kv.EnableBlockEvents(/*max_pending=*/6);
  std::set<BlockHash> mirror;
  std::vector<SequenceId> live;
  SequenceId next = 1;
  for (int step = 0; step < 2000; ++step) {
    const int op = static_cast<int>(rng() % 4);
    if (op <= 1 && live.size() < 4) {
      // Prompts from a few shared stems, so names repeat and get reused.
      std::vector<int32_t> prompt = Iota(4 * static_cast<int32_t>(rng() % 3), 100 * (rng() % 3));
      const std::vector<int32_t> tail = Iota(1 + static_cast<int32_t>(rng() % 9),
                                             static_cast<int32_t>(rng() % 5) * 10);
      prompt = Concat(prompt, tail);
      if (kv.BlocksNeeded(static_cast<int32_t>(prompt.size())) > kv.num_free_blocks()) {
        continue;
      }
      AddAndPrefill(next, prompt);
      live.push_back(next++);
    } else if (op == 2 && !live.empty()) {
      const size_t i = rng() % live.size();
      ASSERT_OK(kv.Free(live[i]));
      live.erase(live.begin() + static_cast<std::ptrdiff_t>(i));
    } else {
      KvBlockEvents ev = kv.DrainBlockEvents();
      if (ev.resync) {
        mirror.clear();
      }
      for (BlockHash h : ev.removed) mirror.erase(h);
      mirror.insert(ev.added.begin(), ev.added.end());
      const std::vector<BlockHash> want = kv.CachedBlockHashes();
      ASSERT_EQ(std::vector<BlockHash>(mirror.begin(), mirror.end()), want)
          << "seed " << seed << " step " << step;
    }
  }
  for (SequenceId s : live) {
    ASSERT_OK(kv.Free(s));
  }
}

}  // namespace
}  // namespace tandem::engine
