// KV block manager micro-benchmarks (block size 16, the default).
//
//   BM_Allocate_Free/blocks       add a sequence, reserve `blocks`, free it (free list only)
//   BM_Allocate_Evict/blocks      the same on a pool full of cached blocks: every block
//                                 allocated evicts the LRU head, and every free re-caches
//   BM_PrefixLookup/blocks        AddSequence attaching a cached prefix of `blocks` full
//                                 blocks (hash chain + map lookup + token check), then Free
//   BM_LongestCachedPrefix/blocks the read-only walk, as a router-side estimate would do
//   BM_ChainBlockHash             naming one 16-token block
//
// items_per_second counts blocks (tokens for BM_ChainBlockHash).

#include <cstdint>
#include <numeric>
#include <vector>

#include "benchmark/benchmark.h"
#include "common/base/logging.h"
#include "common/engine/kv_cache.h"

namespace tandem::engine {
namespace {

constexpr int32_t kBlockSize = 16;

engine::KvCacheConfig Config(int32_t num_blocks) {
  engine::KvCacheConfig config;
  config.num_blocks = num_blocks;
  config.block_size = kBlockSize;
  config.model_id = 1;
  return config;
}

std::vector<int32_t> Tokens(int64_t n, int32_t first) {
  std::vector<int32_t> v(n);
  std::iota(v.begin(), v.end(), first);
  return v;
}

// Prefill as the engine does: add, reserve the prompt, commit it.
void Prefill(engine::KvCacheManager& kv, engine::SequenceId seq, const std::vector<int32_t>& prompt) {
  std::vector<engine::BlockCopy> copies;
  CHECK(kv.AddSequence(seq, prompt).ok());
  CHECK(kv.Reserve(seq, static_cast<int32_t>(prompt.size()), &copies).ok());
  CHECK(kv.Commit(seq, prompt).ok());
}

void BM_Allocate_Free(benchmark::State& state) {
  const int32_t blocks = static_cast<int32_t>(state.range(0));
  engine::KvCacheManager kv(Config(blocks));
  std::vector<engine::BlockCopy> copies;
  engine::SequenceId seq = 0;
  for (auto _ : state) {
    CHECK(kv.AddSequence(seq, {}).ok());
    CHECK(kv.Reserve(seq, blocks * kBlockSize, &copies).ok());
    benchmark::DoNotOptimize(kv.block_table(seq).data());
    CHECK(kv.Free(seq).ok());
    ++seq;
  }
  state.SetItemsProcessed(state.iterations() * blocks);
}
BENCHMARK(BM_Allocate_Free)->RangeMultiplier(8)->Range(1, 4096);

void BM_Allocate_Evict(benchmark::State& state) {
  const int32_t blocks = static_cast<int32_t>(state.range(0));
  engine::KvCacheManager kv(Config(blocks));
  // Fill the whole pool with named, unreferenced blocks.
  Prefill(kv, 0, Tokens(int64_t{blocks} * kBlockSize, 0));
  CHECK(kv.Free(0).ok());
  CHECK_EQ(kv.num_cached_blocks(), blocks);
  std::vector<engine::BlockCopy> copies;
  engine::SequenceId seq = 1;
  int32_t first = 1 << 20;
  for (auto _ : state) {
    // Fresh token ids each round, so the blocks are named anew and cached again.
    const std::vector<int32_t> tokens = Tokens(int64_t{blocks} * kBlockSize, first);
    first += 1 << 20;
    CHECK(kv.AddSequence(seq, {}).ok());
    CHECK(kv.Reserve(seq, static_cast<int32_t>(tokens.size()), &copies).ok());
    CHECK(kv.Commit(seq, tokens).ok());
    CHECK(kv.Free(seq).ok());
    ++seq;
  }
  state.SetItemsProcessed(state.iterations() * blocks);
  state.counters["evictions"] = static_cast<double>(kv.stats().evictions);
}
BENCHMARK(BM_Allocate_Evict)->RangeMultiplier(8)->Range(1, 512);

void BM_PrefixLookup(benchmark::State& state) {
  const int32_t blocks = static_cast<int32_t>(state.range(0));
  engine::KvCacheManager kv(Config(blocks + 1));
  // A cached prefix of `blocks` full blocks; the prompt adds one token to compute.
  std::vector<int32_t> prompt = Tokens(int64_t{blocks} * kBlockSize, 0);
  Prefill(kv, 0, prompt);
  CHECK(kv.Free(0).ok());
  prompt.push_back(7);
  engine::SequenceId seq = 1;
  for (auto _ : state) {
    auto cached = kv.AddSequence(seq, prompt);
    benchmark::DoNotOptimize(cached);
    CHECK(kv.Free(seq).ok());
    ++seq;
  }
  CHECK_EQ(kv.stats().prefix_hits_tokens / (seq - 1), int64_t{blocks} * kBlockSize);
  state.SetItemsProcessed(state.iterations() * blocks);
}
BENCHMARK(BM_PrefixLookup)->RangeMultiplier(8)->Range(1, 4096);

void BM_LongestCachedPrefix(benchmark::State& state) {
  const int32_t blocks = static_cast<int32_t>(state.range(0));
  engine::KvCacheManager kv(Config(blocks));
  const std::vector<int32_t> prompt = Tokens(int64_t{blocks} * kBlockSize, 0);
  Prefill(kv, 0, prompt);
  CHECK(kv.Free(0).ok());
  for (auto _ : state) {
    benchmark::DoNotOptimize(kv.LongestCachedPrefix(prompt));
  }
  state.SetItemsProcessed(state.iterations() * blocks);
}
BENCHMARK(BM_LongestCachedPrefix)->RangeMultiplier(8)->Range(1, 4096);

void BM_ChainBlockHash(benchmark::State& state) {
  const std::vector<int32_t> block = Tokens(kBlockSize, 100);
  engine::BlockHash h = engine::ModelSeedHash(1);
  for (auto _ : state) {
    h = engine::ChainBlockHash(h, block);
    benchmark::DoNotOptimize(h);
  }
  state.SetItemsProcessed(state.iterations() * kBlockSize);
}
BENCHMARK(BM_ChainBlockHash);

}  // namespace
}  // namespace tandem::engine

BENCHMARK_MAIN();
