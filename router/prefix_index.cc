#include "router/prefix_index.h"

#include <algorithm>
#include <utility>

#include "common/engine/kv_cache.h"

namespace tandem::router {

std::vector<uint64_t> PromptBlockHashes(absl::Span<const int32_t> prompt,
                                        const PrefixIndex::Naming& naming, int32_t max_blocks) {
  std::vector<uint64_t> out;
  if (naming.block_size <= 0 || max_blocks <= 0) {
    return out;
  }
  const size_t bs = static_cast<size_t>(naming.block_size);
  const size_t n = std::min(static_cast<size_t>(max_blocks), prompt.size() / bs);
  out.reserve(n);
  engine::BlockHash h = engine::ModelSeedHash(naming.model_id);
  for (size_t i = 0; i < n; ++i) {
    h = engine::ChainBlockHash(h, prompt.subspan(i * bs, bs));
    out.push_back(h);
  }
  return out;
}

void PrefixIndex::Reset(const std::string& address, const Naming& naming,
                        absl::Span<const uint64_t> hashes) {
  absl::WriterMutexLock lock(&mu_);
  Entry& e = workers_[address];
  e.naming = naming;
  e.blocks.clear();
  e.blocks.insert(hashes.begin(), hashes.end());
}

void PrefixIndex::Apply(const std::string& address, absl::Span<const uint64_t> added,
                        absl::Span<const uint64_t> removed) {
  absl::WriterMutexLock lock(&mu_);
  auto it = workers_.find(address);
  if (it == workers_.end()) {
    return;
  }
  for (uint64_t h : removed) {
    it->second.blocks.erase(h);
  }
  it->second.blocks.insert(added.begin(), added.end());
}

void PrefixIndex::Resync(const std::string& address, absl::Span<const uint64_t> hashes) {
  absl::WriterMutexLock lock(&mu_);
  auto it = workers_.find(address);
  if (it == workers_.end()) {
    return;
  }
  it->second.blocks.clear();
  it->second.blocks.insert(hashes.begin(), hashes.end());
}

void PrefixIndex::Drop(const std::string& address) {
  absl::WriterMutexLock lock(&mu_);
  workers_.erase(address);
}

std::map<std::string, int32_t> PrefixIndex::CachedPrefixTokens(
    absl::Span<const int32_t> prompt) const {
  std::map<std::string, int32_t> out;
  if (prompt.empty()) {
    return out;
  }
  absl::ReaderMutexLock lock(&mu_);
  // Workers of one model share a naming: hash the prompt once per naming.
  std::vector<std::pair<Naming, std::vector<uint64_t>>> chains;
  for (const auto& [address, e] : workers_) {
    if (e.naming.block_size <= 0 || e.blocks.empty()) {
      continue;
    }
    const std::vector<uint64_t>* chain = nullptr;
    for (const auto& [naming, hashes] : chains) {
      if (naming == e.naming) {
        chain = &hashes;
      }
    }
    if (chain == nullptr) {
      const int32_t max_blocks =
          static_cast<int32_t>((prompt.size() - 1) / static_cast<size_t>(e.naming.block_size));
      chains.emplace_back(e.naming, PromptBlockHashes(prompt, e.naming, max_blocks));
      chain = &chains.back().second;
    }
    int32_t matched = 0;
    for (uint64_t h : *chain) {
      if (!e.blocks.contains(h)) {
        break;
      }
      ++matched;
    }
    if (matched > 0) {
      out[address] = matched * e.naming.block_size;
    }
  }
  return out;
}

int64_t PrefixIndex::num_blocks(const std::string& address) const {
  absl::ReaderMutexLock lock(&mu_);
  auto it = workers_.find(address);
  return it == workers_.end() ? 0 : static_cast<int64_t>(it->second.blocks.size());
}

int64_t PrefixIndex::total_blocks() const {
  absl::ReaderMutexLock lock(&mu_);
  int64_t n = 0;
  for (const auto& [address, e] : workers_) {
    n += static_cast<int64_t>(e.blocks.size());
  }
  return n;
}

int PrefixIndex::num_workers() const {
  absl::ReaderMutexLock lock(&mu_);
  return static_cast<int>(workers_.size());
}

}  // namespace tandem::router
