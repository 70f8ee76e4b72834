#pragma once
// What the kvtransfer tests, the UCX peer process and the transfer benchmark
// agree on without gtest: data patterns, fingerprints, and the descriptor
// line a receiver prints.

#include <cstdint>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/string_view.h"
#include "kvtransfer/transport.h"

namespace tandem::kvtransfer::testing {

// Deterministic bytes for `seed` (cheap: 8 bytes per step).
inline void FillPattern(void* dst, size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  auto* p = static_cast<uint8_t*>(dst);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    const uint64_t v = rng();
    std::memcpy(p + i, &v, 8);
  }
  const uint64_t v = rng();
  std::memcpy(p + i, &v, n - i);
}

// FNV-1a over 8-byte words (then the tail); the same in every process.
inline uint64_t Fingerprint(const void* data, size_t n) {
  const auto* p = static_cast<const uint8_t*>(data);
  uint64_t h = 1469598103934665603ull;
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h = (h ^ w) * 1099511628211ull;
  }
  for (; i < n; ++i) {
    h = (h ^ p[i]) * 1099511628211ull;
  }
  return h;
}

inline std::string HexEncode(absl::string_view bytes) {
  static constexpr char kDigits[] = "0123456789abcdef";
  std::string out;
  out.reserve(bytes.size() * 2);
  for (unsigned char c : bytes) {
    out.push_back(kDigits[c >> 4]);
    out.push_back(kDigits[c & 15]);
  }
  return out;
}

inline std::string HexDecode(absl::string_view hex) {
  auto nibble = [](char c) { return c <= '9' ? c - '0' : c - 'a' + 10; };
  std::string out(hex.size() / 2, '\0');
  for (size_t i = 0; i < out.size(); ++i) {
    out[i] = static_cast<char>(nibble(hex[2 * i]) << 4 | nibble(hex[2 * i + 1]));
  }
  return out;
}

// "DESC h<hex worker address> h<hex rkey> <base> <bytes>" and back.
inline std::string DescriptorLine(const RegionDescriptor& d) {
  return absl::StrCat("DESC h", HexEncode(d.worker_address), " h", HexEncode(d.rkey), " ", d.base,
                      " ", d.bytes);
}

inline bool ParseDescriptorLine(absl::string_view line, RegionDescriptor* d) {
  std::vector<absl::string_view> f = absl::StrSplit(line, ' ', absl::SkipEmpty());
  if (f.size() != 5 || f[0] != "DESC" || f[1].empty() || f[2].empty()) {
    return false;
  }
  d->worker_address = HexDecode(f[1].substr(1));
  d->rkey = HexDecode(f[2].substr(1));
  return absl::SimpleAtoi(f[3], &d->base) && absl::SimpleAtoi(f[4], &d->bytes);
}

}  // namespace tandem::kvtransfer::testing
