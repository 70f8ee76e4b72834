#pragma once
// Paged KV cache bookkeeping: a pool of fixed-size blocks (default 16 tokens),
// per-sequence block tables, reference counts, copy-on-write of a shared
// partial block, and a prefix cache naming every full block by a hash chained
// over all token ids before it (and the model id).
//
// Owned by the engine thread; not thread-safe. The KV bytes live in
// KvStorage, addressed by block id; this class only does the accounting.

#include <cstdint>
#include <list>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "absl/container/flat_hash_map.h"
#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/types/span.h"
#include "common/engine/format/ggml_type.h"

namespace tandem::engine {

using BlockId = int32_t;
using SequenceId = int64_t;
using BlockHash = uint64_t;

struct KvCacheConfig {
  int32_t num_blocks = 0;
  int32_t block_size = 16;       // tokens per block
  bool enable_prefix_cache = true;
  uint64_t model_id = 0;         // seeds the hash chain: blocks of two models never alias

  // InvalidArgument naming the field (num_blocks < 0, block_size <= 0).
  absl::Status Validate() const;
};

// Copies the engine must perform before writing: duplicate block `src` into
// `dst` (all layers), from copy-on-write of a shared partial block.
struct BlockCopy {
  BlockId src;
  BlockId dst;
};

struct KvCacheStats {
  int32_t num_blocks = 0;
  int32_t free_blocks = 0;       // allocatable now (includes evictable cached blocks)
  int32_t used_blocks = 0;       // referenced by at least one sequence
  int32_t cached_blocks = 0;     // unreferenced blocks kept for the prefix cache (evictable)
  int64_t prefix_hits_tokens = 0;
  int64_t prefix_queries_tokens = 0;
  int64_t evictions = 0;
};

// The hash of a full block given the hash of the previous one (or the model
// seed for the first) and the block's token ids. Token ids are absorbed two
// at a time (packed into one 64-bit word) with the splitmix64 finalizer, a
// bijective 64-bit mix with full avalanche: h = Mix(h ^ (pair + golden)),
// after folding in the block length, so two blocks share a hash only by a
// 64-bit accident; equal blocks after different prefixes differ because
// `prev` differs. Lookups compare a block's own token ids (a collision there
// is caught), not the ids before it (a collision in the chain is accepted at
// ~2^-64, as in vLLM). Stable across processes and builds (no per-process
// salt): a router may compute the same names.
BlockHash ChainBlockHash(BlockHash prev, absl::Span<const int32_t> tokens);
BlockHash ModelSeedHash(uint64_t model_id);

// Net changes to the set of block names (the prefix cache's named blocks, in
// use or evictable) since the previous KvCacheManager::DrainBlockEvents, for
// workers that publish them to routers (KV-aware placement). `added` and
// `removed` are disjoint and sorted: a name that came and went (or went and
// came back) between two drains appears once, as its last change. With
// `resync`, `added` is the whole set and `removed` is empty: the consumer
// replaces what it holds instead of applying a change.
struct KvBlockEvents {
  bool resync = false;
  std::vector<BlockHash> added;
  std::vector<BlockHash> removed;
  bool empty() const { return !resync && added.empty() && removed.empty(); }
};

// Distinct names a worker buffers between two drains (one engine step) by
// default; more turn the next drain into a resync.
inline constexpr int32_t kDefaultMaxPendingBlockEvents = 4096;

class KvCacheManager {
 public:
  // Precondition: config.Validate() is ok (CHECKed: the config is validated
  // once at startup, so a bad one here is a bug).
  explicit KvCacheManager(const KvCacheConfig& config);

  const KvCacheConfig& config() const { return config_; }

  // Starts a sequence whose prompt is `prompt`. With the prefix cache on, it
  // attaches the longest run of cached full blocks matching the prompt's
  // prefix, leaving at least one prompt token to compute (its logits are
  // needed). Returns the number of prompt tokens already in the cache.
  // AlreadyExists if `seq` is live.
  absl::StatusOr<int32_t> AddSequence(SequenceId seq, absl::Span<const int32_t> prompt);

  // Makes room for the sequence to hold `num_tokens` tokens in total,
  // allocating blocks (evicting LRU cached blocks if needed). If the write
  // position (the committed token count) falls inside a block shared with
  // another sequence, that block is copied first (appended to `copies`; the
  // engine must copy the KV bytes before writing). Never shrinks a table.
  // ResourceExhausted when the pool cannot supply the blocks (nothing is
  // changed then; the message names needed and free blocks). NotFound for
  // unknown seq; InvalidArgument for num_tokens < 0, or when a copy is needed
  // and `copies` is null.
  absl::Status Reserve(SequenceId seq, int32_t num_tokens, std::vector<BlockCopy>* copies);

  // Records that the sequence's KV now holds `tokens` (all tokens so far,
  // prompt and generated): every newly full block is named and entered into
  // the prefix cache. If another block already holds that name, the cache
  // keeps the existing one and this block stays private (unnamed).
  // NotFound for unknown seq; InvalidArgument if `tokens` is shorter than what
  // was committed before or longer than what was reserved.
  absl::Status Commit(SequenceId seq, absl::Span<const int32_t> tokens);

  // New sequence `dst` sharing the blocks that hold `src`'s committed tokens
  // (refcounted; parallel sampling / beam search); blocks `src` reserved
  // beyond them stay private to `src`. The shared last partial block is copied
  // on the next Reserve of whichever sequence writes first. Call between
  // steps (after Commit, before the next Reserve). NotFound for unknown src,
  // AlreadyExists if dst is live.
  absl::Status Fork(SequenceId src, SequenceId dst);

  // Drops the sequence: blocks whose count reaches zero go back to the free
  // list, named ones kept as evictable prefix-cache blocks (LRU order). Blocks
  // are released last-first, so a chain's tail is evicted before its head
  // (the head is what other prompts can still reuse). NotFound for unknown seq.
  absl::Status Free(SequenceId seq);

  // Drops every unreferenced cached block (e.g. on model reload).
  void ClearPrefixCache();

  bool HasSequence(SequenceId seq) const;
  absl::Span<const BlockId> block_table(SequenceId seq) const;  // empty if unknown
  int32_t num_tokens(SequenceId seq) const;                     // committed tokens
  int32_t num_free_blocks() const;
  int32_t num_used_blocks() const;
  int32_t num_cached_blocks() const;
  int32_t BlocksNeeded(int32_t num_tokens) const;
  // Length in tokens of the longest cached prefix of `tokens` (full blocks
  // only; cached means named, whether in use or evictable). Unlike
  // AddSequence it does not leave a token to compute, nor count as a query.
  int32_t LongestCachedPrefix(absl::Span<const int32_t> tokens) const;
  // prefix_queries_tokens counts every prompt token passed to AddSequence
  // (prefix cache on); prefix_hits_tokens those attached from the cache.
  KvCacheStats stats() const;
  int32_t ref_count(BlockId block) const;  // 0 for an id outside the pool

  // Block events (off by default: then naming and evicting a block cost one
  // branch more and nothing is recorded). After this call every name entered
  // into or dropped from the prefix cache is buffered, at most `max_pending`
  // distinct names between two drains; past that the buffer is dropped and
  // the next drain is a resync. The first drain after enabling is a resync
  // (the set so far). Precondition: max_pending >= 1 (CHECKed).
  void EnableBlockEvents(int32_t max_pending = kDefaultMaxPendingBlockEvents);
  // The changes since the previous drain; empty when events are off or
  // nothing changed.
  KvBlockEvents DrainBlockEvents();
  // Every current block name, sorted.
  std::vector<BlockHash> CachedBlockHashes() const;

 private:
  struct Block {
    int32_t ref_count = 0;
    std::optional<BlockHash> hash;            // set iff cached_[*hash] == this block
    std::vector<int32_t> tokens;              // the block's token ids when named (collision check)
    std::list<BlockId>::iterator lru_it;      // valid while in lru_
    bool in_lru = false;
  };
  struct Sequence {
    std::vector<BlockId> blocks;
    int32_t num_tokens = 0;                   // committed
    int32_t num_named_blocks = 0;             // leading blocks already hashed
    BlockHash last_hash = 0;
  };

  // Pops a free block, else evicts the LRU head. CHECKs that one is available:
  // callers count first (Reserve is all-or-nothing).
  BlockId AllocateBlock();
  void ReleaseBlock(BlockId id);
  // Detaches `id` from the LRU list and prefix map and returns it to the free list.
  void DropCachedBlock(BlockId id);
  // Walks the prompt's full blocks (at most `max_blocks`) through the prefix
  // map, verifying token ids; appends matches to `out` and their chain's last
  // hash to `*last_hash`.
  void MatchPrefix(absl::Span<const int32_t> tokens, int32_t max_blocks,
                   std::vector<BlockId>* out, BlockHash* last_hash) const;
  // Records that `hash` was entered into (added) or dropped from the prefix
  // cache, when block events are on.
  void NoteBlockEvent(BlockHash hash, bool added);

  KvCacheConfig config_;
  std::vector<Block> blocks_;
  std::vector<BlockId> free_list_;            // never-named or invalidated blocks
  std::list<BlockId> lru_;                    // unreferenced named blocks, oldest first
  absl::flat_hash_map<BlockHash, BlockId> cached_;
  absl::flat_hash_map<SequenceId, Sequence> seqs_;
  int32_t num_used_ = 0;                      // blocks with ref_count > 0
  int64_t prefix_hits_tokens_ = 0;
  int64_t prefix_queries_tokens_ = 0;
  int64_t evictions_ = 0;
  // Block events (EnableBlockEvents): last change per name since the drain.
  bool events_on_ = false;
  bool events_resync_ = false;
  int32_t events_max_pending_ = 0;
  absl::flat_hash_map<BlockHash, bool> pending_events_;  // name -> added (else removed)
};

}  // namespace tandem::engine
