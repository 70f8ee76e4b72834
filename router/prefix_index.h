#pragma once
// PrefixIndex: which KV blocks each worker holds in its prefix cache, as the
// workers report them (WorkerSnapshot.cached_block_hashes, then KvBlockEvent
// changes on the Control.Watch stream), and how long a prefix of a prompt
// each worker could reuse. A block is named as the worker names it
// (engine::ChainBlockHash chained from engine::ModelSeedHash(model_id),
// block_size tokens at a time), with the model id and block size the
// worker's snapshot announced (KvLayout), so the router computes a prompt's
// names from its token ids without asking anyone.
//
// Written by the router's control thread (WorkerRegistry: a worker's entry
// is replaced by each new stream's snapshot and dropped when the worker
// leaves rotation or discovery); read by request threads through the
// registry snapshot. Thread-safe: one reader/writer lock; lookups hold it
// shared for the length of the walk (no allocation per block).
//
// The index is advisory: a block evicted on the worker after its last event
// arrived only costs a miss there (the worker recomputes it).

#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/base/thread_annotations.h"
#include "absl/container/flat_hash_set.h"
#include "absl/synchronization/mutex.h"
#include "absl/types/span.h"

namespace tandem::router {

class PrefixIndex {
 public:
  // How a worker names its blocks (from its KvLayout).
  struct Naming {
    uint64_t model_id = 0;
    int32_t block_size = 0;  // tokens per block; <= 0: the worker is not indexed
    bool operator==(const Naming&) const = default;
  };

  // Control thread. Replaces `address`'s entry: its naming and the whole set
  // of its block names (a snapshot, or a KvBlockEvent with resync).
  void Reset(const std::string& address, const Naming& naming, absl::Span<const uint64_t> hashes);
  // Control thread. Applies a change; ignored for an address without an
  // entry (no snapshot yet on the current stream).
  void Apply(const std::string& address, absl::Span<const uint64_t> added,
             absl::Span<const uint64_t> removed);
  // Control thread. Replaces the set, keeping the naming (resync).
  void Resync(const std::string& address, absl::Span<const uint64_t> hashes);
  // Control thread. Forgets `address` (it left rotation or discovery).
  void Drop(const std::string& address);

  // Any thread. For every indexed worker with at least one matching block:
  // the number of prompt tokens at the start of `prompt` its prefix cache
  // holds, in whole blocks. Like the worker's KvCacheManager::AddSequence, at
  // most (prompt.size() - 1) / block_size blocks count (one prompt token is
  // always computed, for its logits). Keyed by address.
  std::map<std::string, int32_t> CachedPrefixTokens(absl::Span<const int32_t> prompt) const;

  // Any thread. Blocks indexed for `address` (0 when none), for tests and logs.
  int64_t num_blocks(const std::string& address) const;
  // Any thread. Indexed workers, and blocks summed over them.
  int num_workers() const;
  int64_t total_blocks() const;

 private:
  struct Entry {
    Naming naming;
    absl::flat_hash_set<uint64_t> blocks;
  };

  mutable absl::Mutex mu_;
  std::map<std::string, Entry> workers_ ABSL_GUARDED_BY(mu_);
};

// The names of the first `max_blocks` full blocks of `prompt` under `naming`
// (fewer when the prompt is shorter): what PrefixIndex looks up.
std::vector<uint64_t> PromptBlockHashes(absl::Span<const int32_t> prompt,
                                        const PrefixIndex::Naming& naming, int32_t max_blocks);

}  // namespace tandem::router
