// The router's prefix index: longest cached prefix per worker, each worker
// under its own naming (model id, block size); and, against the worker's own
// KvCacheManager fed the same block events, the router's estimate equals the
// prefix the worker attaches (AddSequence), prompt by prompt.

#include "router/prefix_index.h"

#include <atomic>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "common/engine/kv_cache.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;
using ::testing::Pair;

std::vector<int32_t> Tokens(int n, int first = 1) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = first + i;
  return v;
}

TEST(PrefixIndexTest, LongestPrefixPerWorker) {
  const PrefixIndex::Naming naming{7, 16};
  const std::vector<uint64_t> names = PromptBlockHashes(Tokens(64), naming, 4);
  ASSERT_EQ(names.size(), 4u);
  PrefixIndex index;
  index.Reset("a", naming, {names[0], names[1]});
  index.Reset("b", naming, names);
  index.Reset("c", naming, {names[1], names[2]});  // no first block: no prefix
  index.Reset("d", naming, {});
  EXPECT_THAT(index.CachedPrefixTokens(Tokens(100)), ElementsAre(Pair("a", 32), Pair("b", 64)));
  // At most (n - 1) / 16 blocks: the last prompt token is always computed.
  EXPECT_THAT(index.CachedPrefixTokens(Tokens(64)), ElementsAre(Pair("a", 32), Pair("b", 48)));
  EXPECT_THAT(index.CachedPrefixTokens(Tokens(16)), IsEmpty());
  EXPECT_THAT(index.CachedPrefixTokens({}), IsEmpty());
  // A different first token changes every name after it.
  std::vector<int32_t> other = Tokens(100);
  other[0] = 999;
  EXPECT_THAT(index.CachedPrefixTokens(other), IsEmpty());

  index.Apply("b", {}, {names[2]});  // evicted on b
  index.Apply("c", {names[0]}, {});
  index.Apply("nobody", names, {});  // no entry: ignored
  EXPECT_THAT(index.CachedPrefixTokens(Tokens(100)),
              ElementsAre(Pair("a", 32), Pair("b", 32), Pair("c", 48)));
  index.Resync("a", {names[0]});
  index.Drop("b");
  EXPECT_THAT(index.CachedPrefixTokens(Tokens(100)), ElementsAre(Pair("a", 16), Pair("c", 48)));
  EXPECT_EQ(index.num_blocks("c"), 3);
  EXPECT_EQ(index.num_blocks("b"), 0);
  EXPECT_EQ(index.num_workers(), 3);
}

TEST(PrefixIndexTest, EachWorkerUnderItsOwnNaming) {
  const PrefixIndex::Naming m1_bs16{1, 16}, m2_bs16{2, 16}, m1_bs8{1, 8};
  PrefixIndex index;
  index.Reset("m1", m1_bs16, PromptBlockHashes(Tokens(64), m1_bs16, 4));
  index.Reset("m2", m2_bs16, PromptBlockHashes(Tokens(64), m2_bs16, 2));
  index.Reset("bs8", m1_bs8, PromptBlockHashes(Tokens(64), m1_bs8, 3));
  // The names of one model never match another's (the seed differs).
  index.Reset("m2-with-m1-names", m2_bs16, PromptBlockHashes(Tokens(64), m1_bs16, 4));
  EXPECT_THAT(index.CachedPrefixTokens(Tokens(65)),
              ElementsAre(Pair("bs8", 24), Pair("m1", 64), Pair("m2", 32)));
}

TEST(PrefixIndexTest, PromptBlockHashesAreTheWorkersNames) {
  const PrefixIndex::Naming naming{0, 16};
  std::vector<uint64_t> names = PromptBlockHashes(Tokens(40, 0), naming, 10);
  ASSERT_EQ(names.size(), 2u);  // full blocks only
  std::vector<int32_t> first(16);
  for (int i = 0; i < 16; ++i) first[i] = i;
  // The pinned name of kv_cache_test's ChainBlockHashTest.NamesAreStable.
  EXPECT_EQ(names[0], 0x50a56d3aabd0927bULL);
  EXPECT_EQ(names[0], engine::ChainBlockHash(engine::ModelSeedHash(0), first));
  EXPECT_THAT(PromptBlockHashes(Tokens(40), naming, 1), ::testing::SizeIs(1));
  EXPECT_THAT(PromptBlockHashes(Tokens(40), PrefixIndex::Naming{0, 0}, 4), IsEmpty());
}

// A worker's KvCacheManager publishes its block events; an index fed with
// them (as the router is, through the Watch stream) estimates for each new
// prompt exactly the prefix AddSequence then attaches, across evictions.
TEST(PrefixIndexTest, EstimateEqualsWhatTheWorkerAttaches) {
  const uint32_t seed = 11;
  std::mt19937 rng(seed);
  engine::KvCacheConfig config;
  config.num_blocks = 40;
  config.block_size = 8;
  config.model_id = 1234;
  engine::KvCacheManager kv(config);
  kv.EnableBlockEvents(/*max_pending=*/16);
  PrefixIndex index;
  index.Reset("w", PrefixIndex::Naming{config.model_id, config.block_size}, {});
  auto sync = [&] {
    const engine::KvBlockEvents ev = kv.DrainBlockEvents();
    if (ev.resync) {
      index.Resync("w", ev.added);
    } else {
      index.Apply("w", ev.added, ev.removed);
    }
  };
  int attached_total = 0;
  for (engine::SequenceId seq = 1; seq <= 300; ++seq) {
    // Conversations: a few system prompts, a growing history, a new turn.
    std::vector<int32_t> prompt = Tokens(8 * static_cast<int>(rng() % 4), 1000 * (rng() % 3));
    const std::vector<int32_t> turn =
        Tokens(1 + static_cast<int>(rng() % 60), static_cast<int>(rng() % 4) * 100);
    prompt.insert(prompt.end(), turn.begin(), turn.end());
    if (kv.BlocksNeeded(static_cast<int32_t>(prompt.size())) > kv.num_free_blocks()) {
      continue;
    }
    sync();
    const std::map<std::string, int32_t> estimate = index.CachedPrefixTokens(prompt);
    ASSERT_OK_AND_ASSIGN(int32_t attached, kv.AddSequence(seq, prompt));
    const int32_t est = estimate.count("w") > 0 ? estimate.at("w") : 0;
    ASSERT_EQ(est, attached) << "seed " << seed << " sequence " << seq;
    attached_total += attached;
    ASSERT_OK(kv.Reserve(seq, static_cast<int32_t>(prompt.size()), nullptr));
    ASSERT_OK(kv.Commit(seq, prompt));
    ASSERT_OK(kv.Free(seq));
  }
  EXPECT_GT(attached_total, 0) << "the workload never reused a prefix";
  EXPECT_GT(kv.stats().evictions, 0) << "the workload never evicted";
}

// The control thread writes while request threads read (run under TSan by
// scripts/check_tsan.sh): every answer is one the writer made possible.
TEST(PrefixIndexTest, ConcurrentReadersAndAWriter) {
  const PrefixIndex::Naming naming{3, 16};
  const std::vector<int32_t> prompt = Tokens(129);
  const std::vector<uint64_t> names = PromptBlockHashes(prompt, naming, 8);
  PrefixIndex index;
  std::atomic<bool> stop{false};
  std::vector<std::thread> readers;
  std::atomic<int> bad{0};
  for (int t = 0; t < 3; ++t) {
    readers.emplace_back([&] {
      while (!stop.load()) {
        for (const auto& [address, tokens] : index.CachedPrefixTokens(prompt)) {
          if (tokens % 16 != 0 || tokens > 128 || (address != "a" && address != "b")) {
            bad.fetch_add(1);
          }
        }
        index.total_blocks();
      }
    });
  }
  for (int i = 0; i < 2000; ++i) {
    const std::string address = i % 2 ? "a" : "b";
    index.Reset(address, naming, absl::MakeConstSpan(names).subspan(0, i % 9));
    index.Apply(address, {names[i % 8]}, {names[(i + 3) % 8]});
    if (i % 7 == 0) index.Drop(address);
  }
  stop.store(true);
  for (std::thread& t : readers) t.join();
  EXPECT_EQ(bad.load(), 0);
}

}  // namespace
}  // namespace tandem::router
