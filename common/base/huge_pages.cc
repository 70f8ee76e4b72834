#include "common/base/huge_pages.h"

#include <sys/mman.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <utility>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"

namespace tandem::base {
namespace {

size_t RoundUp(size_t n, size_t to) { return (n + to - 1) / to * to; }

}  // namespace

absl::StatusOr<HugePageMapping> HugePageMapping::Map(size_t bytes) {
  if (bytes == 0 || bytes > (size_t{1} << 50)) {
    return absl::InvalidArgumentError(absl::StrCat("huge-page mapping of ", bytes, " bytes"));
  }
  const size_t size = RoundUp(bytes, kHugePageBytes);
  // Map a huge page more than asked, then trim the head and tail so that
  // what stays starts on a 2 MiB boundary.
  const size_t span = size + kHugePageBytes;
  void* raw = mmap(nullptr, span, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) {
    return absl::ResourceExhaustedError(
        absl::StrCat("cannot map ", size, " bytes: ", std::strerror(errno)));
  }
  const uintptr_t begin = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t aligned = RoundUp(begin, kHugePageBytes);
  if (aligned > begin) munmap(raw, aligned - begin);
  const uintptr_t end = begin + span;
  if (end > aligned + size) munmap(reinterpret_cast<void*>(aligned + size), end - aligned - size);
  auto* data = reinterpret_cast<uint8_t*>(aligned);
  madvise(data, size, MADV_HUGEPAGE);  // advisory: fails (harmlessly) where THP is not built
  return HugePageMapping(data, size);
}

HugePageMapping::HugePageMapping(HugePageMapping&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

HugePageMapping& HugePageMapping::operator=(HugePageMapping&& other) noexcept {
  if (this != &other) {
    Unmap();
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

HugePageMapping::~HugePageMapping() { Unmap(); }

void HugePageMapping::Unmap() {
  if (data_ != nullptr) munmap(data_, size_);
  data_ = nullptr;
  size_ = 0;
}

HugePageArena::HugePageArena(size_t chunk_bytes)
    : chunk_bytes_(RoundUp(chunk_bytes == 0 ? 1 : chunk_bytes, kHugePageBytes)) {}

absl::StatusOr<std::shared_ptr<uint8_t>> HugePageArena::Allocate(size_t bytes) {
  if (bytes == 0) return absl::InvalidArgumentError("huge-page arena: a piece of 0 bytes");
  constexpr size_t kAlign = 64;
  absl::MutexLock lock(&mu_);
  std::shared_ptr<HugePageMapping> chunk = current_.lock();
  const size_t rest = chunk == nullptr ? 0 : chunk->size() - used_;
  if (bytes <= rest) {
    uint8_t* p = chunk->data() + used_;
    used_ = std::min(chunk->size(), RoundUp(used_ + bytes, kAlign));
    return std::shared_ptr<uint8_t>(std::move(chunk), p);  // aliasing: owns the chunk
  }
  auto mapping = HugePageMapping::Map(std::max(chunk_bytes_, bytes));
  if (!mapping.ok()) return mapping.status();
  auto fresh = std::make_shared<HugePageMapping>(*std::move(mapping));
  const size_t fresh_used = std::min(fresh->size(), RoundUp(bytes, kAlign));
  // Later pieces go where more room is left: the new chunk's rest or the
  // current one's (a piece larger than a chunk leaves little).
  if (fresh->size() - fresh_used >= rest) {
    current_ = fresh;
    used_ = fresh_used;
  }
  uint8_t* p = fresh->data();
  return std::shared_ptr<uint8_t>(std::move(fresh), p);
}

HugePageArena& HugePageArena::Weights() {
  static HugePageArena* arena = new HugePageArena();
  return *arena;
}

}  // namespace tandem::base
