#include "common/engine/kv_cache.h"

#include <algorithm>
#include <utility>

#include "absl/strings/str_cat.h"
#include "common/base/logging.h"

namespace tandem::engine {
namespace {

// splitmix64's finalizer (Steele, Lea, Flood 2014; constants from Stafford's
// "Mix13"): bijective on 64 bits with full avalanche.
inline uint64_t Mix64(uint64_t x) {
  x ^= x >> 30;
  x *= 0xbf58476d1ce4e5b9ULL;
  x ^= x >> 27;
  x *= 0x94d049bb133111ebULL;
  x ^= x >> 31;
  return x;
}

constexpr uint64_t kGolden = 0x9e3779b97f4a7c15ULL;
constexpr uint64_t kModelSalt = 0x6b76636163686531ULL;  // "kvcache1"

}  // namespace

BlockHash ChainBlockHash(BlockHash prev, absl::Span<const int32_t> tokens) {
  // Folding in the length keeps a block of n tokens distinct from a longer one
  // it prefixes. Each step absorbs two ids packed into one word, so it is
  // injective in them for a fixed state (and the chain is half as long).
  uint64_t h = Mix64(prev ^ (kGolden * (tokens.size() + 1)));
  size_t i = 0;
  for (; i + 2 <= tokens.size(); i += 2) {
    const uint64_t pair = (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) << 32) |
                          static_cast<uint32_t>(tokens[i + 1]);
    h = Mix64(h ^ (pair + kGolden));
  }
  if (i < tokens.size()) {
    h = Mix64(h ^ (static_cast<uint64_t>(static_cast<uint32_t>(tokens[i])) + kGolden));
  }
  return h;
}

BlockHash ModelSeedHash(uint64_t model_id) { return Mix64(Mix64(model_id ^ kModelSalt)); }

absl::Status KvCacheConfig::Validate() const {
  if (num_blocks < 0) {
    return absl::InvalidArgumentError(absl::StrCat("num_blocks must be >= 0, got ", num_blocks));
  }
  if (block_size <= 0) {
    return absl::InvalidArgumentError(absl::StrCat("block_size must be > 0, got ", block_size));
  }
  return absl::OkStatus();
}

KvCacheManager::KvCacheManager(const KvCacheConfig& config)
    : config_(config), blocks_(std::max(config.num_blocks, 0)) {
  const absl::Status valid = config_.Validate();
  CHECK(valid.ok()) << "KvCacheConfig: " << valid;
  free_list_.reserve(blocks_.size());
  // Popped from the back: block 0 is handed out first.
  for (BlockId id = static_cast<BlockId>(blocks_.size()) - 1; id >= 0; --id) {
    free_list_.push_back(id);
  }
}

int32_t KvCacheManager::BlocksNeeded(int32_t num_tokens) const {
  if (num_tokens <= 0) {
    return 0;
  }
  return (num_tokens + config_.block_size - 1) / config_.block_size;
}

void KvCacheManager::MatchPrefix(absl::Span<const int32_t> tokens, int32_t max_blocks,
                                 std::vector<BlockId>* out, BlockHash* last_hash) const {
  const int32_t bs = config_.block_size;
  BlockHash h = ModelSeedHash(config_.model_id);
  *last_hash = h;
  for (int32_t i = 0; i < max_blocks; ++i) {
    absl::Span<const int32_t> block_tokens = tokens.subspan(static_cast<size_t>(i) * bs, bs);
    h = ChainBlockHash(h, block_tokens);
    auto it = cached_.find(h);
    if (it == cached_.end()) {
      break;
    }
    const Block& b = blocks_[it->second];
    // A 64-bit collision on this block's own tokens is caught here; one in the
    // chain before it cannot be (see ChainBlockHash).
    if (!std::equal(b.tokens.begin(), b.tokens.end(), block_tokens.begin(), block_tokens.end())) {
      break;
    }
    out->push_back(it->second);
    *last_hash = h;
  }
}

absl::StatusOr<int32_t> KvCacheManager::AddSequence(SequenceId seq,
                                                    absl::Span<const int32_t> prompt) {
  if (seqs_.contains(seq)) {
    return absl::AlreadyExistsError(absl::StrCat("sequence ", seq, " already exists"));
  }
  Sequence s;
  s.last_hash = ModelSeedHash(config_.model_id);
  if (config_.enable_prefix_cache && !prompt.empty()) {
    prefix_queries_tokens_ += static_cast<int64_t>(prompt.size());
    // Leave at least one prompt token to compute: its logits start decoding.
    const int32_t max_blocks = static_cast<int32_t>((prompt.size() - 1) / config_.block_size);
    MatchPrefix(prompt, max_blocks, &s.blocks, &s.last_hash);
    for (BlockId id : s.blocks) {
      Block& b = blocks_[id];
      if (b.ref_count == 0) {
        CHECK(b.in_lru) << "unreferenced cached block " << id << " not in the LRU list";
        lru_.erase(b.lru_it);
        b.in_lru = false;
        ++num_used_;
      }
      ++b.ref_count;
    }
    s.num_named_blocks = static_cast<int32_t>(s.blocks.size());
    s.num_tokens = s.num_named_blocks * config_.block_size;
    prefix_hits_tokens_ += s.num_tokens;
  }
  const int32_t cached_tokens = s.num_tokens;
  seqs_.emplace(seq, std::move(s));
  return cached_tokens;
}

BlockId KvCacheManager::AllocateBlock() {
  BlockId id;
  if (!free_list_.empty()) {
    id = free_list_.back();
    free_list_.pop_back();
  } else {
    CHECK(!lru_.empty()) << "AllocateBlock with no free or evictable block";
    id = lru_.front();
    Block& b = blocks_[id];
    CHECK(b.hash.has_value()) << "LRU block " << id << " has no name";
    lru_.pop_front();
    b.in_lru = false;
    NoteBlockEvent(*b.hash, false);
    cached_.erase(*b.hash);
    b.hash.reset();
    b.tokens.clear();
    ++evictions_;
  }
  Block& b = blocks_[id];
  CHECK_EQ(b.ref_count, 0) << "allocating block " << id << " still referenced";
  b.ref_count = 1;
  ++num_used_;
  return id;
}

void KvCacheManager::ReleaseBlock(BlockId id) {
  Block& b = blocks_[id];
  CHECK_GT(b.ref_count, 0) << "block " << id << " released with no reference (double free)";
  if (--b.ref_count > 0) {
    return;
  }
  --num_used_;
  if (b.hash.has_value()) {
    b.lru_it = lru_.insert(lru_.end(), id);
    b.in_lru = true;
  } else {
    b.tokens.clear();
    free_list_.push_back(id);
  }
}

void KvCacheManager::DropCachedBlock(BlockId id) {
  Block& b = blocks_[id];
  CHECK(b.in_lru && b.ref_count == 0) << "dropping block " << id << " that is not evictable";
  lru_.erase(b.lru_it);
  b.in_lru = false;
  NoteBlockEvent(*b.hash, false);
  cached_.erase(*b.hash);
  b.hash.reset();
  b.tokens.clear();
  free_list_.push_back(id);
}

absl::Status KvCacheManager::Reserve(SequenceId seq, int32_t num_tokens,
                                     std::vector<BlockCopy>* copies) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("sequence ", seq, " not found"));
  }
  if (num_tokens < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("sequence ", seq, ": num_tokens must be >= 0, got ", num_tokens));
  }
  Sequence& s = it->second;
  const int32_t bs = config_.block_size;
  const int32_t have = static_cast<int32_t>(s.blocks.size());
  const int32_t grow = std::max(0, BlocksNeeded(num_tokens) - have);
  // Copy-on-write: the next token goes into block s.num_tokens / bs at a
  // nonzero offset, and another sequence also reads that block.
  int32_t cow_index = -1;
  if (num_tokens > s.num_tokens && s.num_tokens % bs != 0) {
    const int32_t idx = s.num_tokens / bs;
    if (idx < have && blocks_[s.blocks[idx]].ref_count > 1) {
      cow_index = idx;
    }
  }
  const int32_t needed = grow + (cow_index >= 0 ? 1 : 0);
  if (needed == 0) {
    return absl::OkStatus();
  }
  if (cow_index >= 0 && copies == nullptr) {
    return absl::InvalidArgumentError(absl::StrCat(
        "sequence ", seq, ": block ", s.blocks[cow_index],
        " is shared and must be copied, but no copy list was given"));
  }
  const int32_t available = num_free_blocks();
  if (needed > available) {
    return absl::ResourceExhaustedError(absl::StrCat(
        "sequence ", seq, ": growing to ", num_tokens, " tokens needs ", needed,
        " KV blocks, only ", available, " free (", free_list_.size(), " free + ", lru_.size(),
        " evictable of ", blocks_.size(), ")"));
  }
  if (cow_index >= 0) {
    const BlockId src = s.blocks[cow_index];
    const BlockId dst = AllocateBlock();
    copies->push_back(BlockCopy{src, dst});
    s.blocks[cow_index] = dst;
    ReleaseBlock(src);  // still referenced by the other sequence(s)
  }
  for (int32_t i = 0; i < grow; ++i) {
    s.blocks.push_back(AllocateBlock());
  }
  return absl::OkStatus();
}

absl::Status KvCacheManager::Commit(SequenceId seq, absl::Span<const int32_t> tokens) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("sequence ", seq, " not found"));
  }
  Sequence& s = it->second;
  const int64_t n = static_cast<int64_t>(tokens.size());
  if (n < s.num_tokens) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": commit of ", n,
                                                   " tokens is below the ", s.num_tokens,
                                                   " already committed"));
  }
  const int64_t capacity = static_cast<int64_t>(s.blocks.size()) * config_.block_size;
  if (n > capacity) {
    return absl::InvalidArgumentError(absl::StrCat("sequence ", seq, ": commit of ", n,
                                                   " tokens exceeds the ", capacity, " reserved"));
  }
  const int32_t bs = config_.block_size;
  if (config_.enable_prefix_cache) {
    const int32_t full = static_cast<int32_t>(n / bs);
    for (int32_t i = s.num_named_blocks; i < full; ++i) {
      absl::Span<const int32_t> block_tokens = tokens.subspan(static_cast<size_t>(i) * bs, bs);
      const BlockHash h = ChainBlockHash(s.last_hash, block_tokens);
      const BlockId id = s.blocks[i];
      Block& b = blocks_[id];
      if (b.hash.has_value()) {
        // Shared through Fork and already named by the other sequence: the same
        // KV bytes, so the same tokens, unless the caller broke that contract.
        if (*b.hash != h) {
          return absl::InvalidArgumentError(
              absl::StrCat("sequence ", seq, ": block ", i, " (id ", id,
                           ") is shared and was committed with different tokens"));
        }
      } else if (cached_.try_emplace(h, id).second) {
        b.hash = h;
        b.tokens.assign(block_tokens.begin(), block_tokens.end());
        NoteBlockEvent(h, true);
      }
      // else: another block already holds this name; this one stays private.
      s.last_hash = h;
      s.num_named_blocks = i + 1;
    }
  }
  s.num_tokens = static_cast<int32_t>(n);
  return absl::OkStatus();
}

absl::Status KvCacheManager::Fork(SequenceId src, SequenceId dst) {
  auto it = seqs_.find(src);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("fork source sequence ", src, " not found"));
  }
  if (seqs_.contains(dst)) {
    return absl::AlreadyExistsError(absl::StrCat("fork target sequence ", dst, " already exists"));
  }
  const Sequence& from = it->second;
  Sequence to;
  const int32_t shared = std::min<int32_t>(BlocksNeeded(from.num_tokens),
                                           static_cast<int32_t>(from.blocks.size()));
  to.blocks.assign(from.blocks.begin(), from.blocks.begin() + shared);
  for (BlockId id : to.blocks) {
    CHECK_GT(blocks_[id].ref_count, 0) << "live sequence " << src << " holds free block " << id;
    ++blocks_[id].ref_count;
  }
  to.num_tokens = from.num_tokens;
  to.num_named_blocks = from.num_named_blocks;
  to.last_hash = from.last_hash;
  seqs_.emplace(dst, std::move(to));  // `from` may dangle after this
  return absl::OkStatus();
}

absl::Status KvCacheManager::Free(SequenceId seq) {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return absl::NotFoundError(absl::StrCat("sequence ", seq, " not found"));
  }
  const std::vector<BlockId>& table = it->second.blocks;
  for (auto b = table.rbegin(); b != table.rend(); ++b) {
    ReleaseBlock(*b);
  }
  seqs_.erase(it);
  return absl::OkStatus();
}

void KvCacheManager::ClearPrefixCache() {
  while (!lru_.empty()) {
    DropCachedBlock(lru_.front());
  }
}

bool KvCacheManager::HasSequence(SequenceId seq) const { return seqs_.contains(seq); }

absl::Span<const BlockId> KvCacheManager::block_table(SequenceId seq) const {
  auto it = seqs_.find(seq);
  if (it == seqs_.end()) {
    return {};
  }
  return it->second.blocks;
}

int32_t KvCacheManager::num_tokens(SequenceId seq) const {
  auto it = seqs_.find(seq);
  return it == seqs_.end() ? 0 : it->second.num_tokens;
}

int32_t KvCacheManager::num_free_blocks() const {
  return static_cast<int32_t>(free_list_.size() + lru_.size());
}

int32_t KvCacheManager::num_used_blocks() const { return num_used_; }

int32_t KvCacheManager::num_cached_blocks() const { return static_cast<int32_t>(lru_.size()); }

int32_t KvCacheManager::LongestCachedPrefix(absl::Span<const int32_t> tokens) const {
  if (!config_.enable_prefix_cache) {
    return 0;
  }
  std::vector<BlockId> matched;
  BlockHash last_hash;
  MatchPrefix(tokens, static_cast<int32_t>(tokens.size() / config_.block_size), &matched,
              &last_hash);
  return static_cast<int32_t>(matched.size()) * config_.block_size;
}

KvCacheStats KvCacheManager::stats() const {
  KvCacheStats st;
  st.num_blocks = static_cast<int32_t>(blocks_.size());
  st.free_blocks = num_free_blocks();
  st.used_blocks = num_used_blocks();
  st.cached_blocks = num_cached_blocks();
  st.prefix_hits_tokens = prefix_hits_tokens_;
  st.prefix_queries_tokens = prefix_queries_tokens_;
  st.evictions = evictions_;
  return st;
}

void KvCacheManager::NoteBlockEvent(BlockHash hash, bool added) {
  if (!events_on_ || events_resync_) {
    return;  // off, or the next drain sends the whole set anyway
  }
  if (static_cast<int32_t>(pending_events_.size()) >= events_max_pending_ &&
      !pending_events_.contains(hash)) {
    pending_events_.clear();
    events_resync_ = true;
    return;
  }
  pending_events_[hash] = added;
}

void KvCacheManager::EnableBlockEvents(int32_t max_pending) {
  CHECK_GE(max_pending, 1) << "EnableBlockEvents: max_pending must be >= 1";
  events_on_ = true;
  events_resync_ = true;
  events_max_pending_ = max_pending;
  pending_events_.clear();
}

KvBlockEvents KvCacheManager::DrainBlockEvents() {
  KvBlockEvents ev;
  if (!events_on_) {
    return ev;
  }
  if (events_resync_) {
    ev.resync = true;
    ev.added = CachedBlockHashes();
    events_resync_ = false;
    return ev;
  }
  for (const auto& [hash, added] : pending_events_) {
    (added ? ev.added : ev.removed).push_back(hash);
  }
  pending_events_.clear();
  std::sort(ev.added.begin(), ev.added.end());
  std::sort(ev.removed.begin(), ev.removed.end());
  return ev;
}

std::vector<BlockHash> KvCacheManager::CachedBlockHashes() const {
  std::vector<BlockHash> out;
  out.reserve(cached_.size());
  for (const auto& [hash, id] : cached_) {
    out.push_back(hash);
  }
  std::sort(out.begin(), out.end());
  return out;
}

int32_t KvCacheManager::ref_count(BlockId block) const {
  if (block < 0 || block >= static_cast<BlockId>(blocks_.size())) {
    return 0;
  }
  return blocks_[block].ref_count;
}

}  // namespace tandem::engine
