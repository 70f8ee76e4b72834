#include "common/base/huge_pages.h"

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <memory>
#include <thread>
#include <utility>
#include <vector>

#include "gtest/gtest.h"
#include "tests/testing/smaps.h"

namespace tandem::base {
namespace {

using ::tandem::testing::AdvisedHugePages;
using ::tandem::testing::Mapped;

constexpr size_t kMiB = size_t{1} << 20;

uintptr_t Addr(const void* p) { return reinterpret_cast<uintptr_t>(p); }

bool AllZero(const uint8_t* p, size_t n) {
  return std::all_of(p, p + n, [](uint8_t b) { return b == 0; });
}

TEST(HugePageMappingTest, AlignedRoundedAdvisedZeroedAndUnmapped) {
  auto m = HugePageMapping::Map(3 * kMiB + 1);
  ASSERT_TRUE(m.ok()) << m.status();
  uint8_t* p = m->data();
  EXPECT_EQ(Addr(p) % kHugePageBytes, 0u);
  EXPECT_EQ(m->size(), 4 * kMiB);
  EXPECT_TRUE(AdvisedHugePages(p));
  EXPECT_TRUE(AdvisedHugePages(p + m->size() - 1));
  EXPECT_TRUE(AllZero(p, m->size()));
  p[m->size() - 1] = 7;  // writable to the end

  HugePageMapping moved = *std::move(m);
  EXPECT_EQ(moved.data(), p);
  EXPECT_TRUE(Mapped(p));
  moved = HugePageMapping();  // unmaps
  EXPECT_FALSE(Mapped(p));
  EXPECT_FALSE(Mapped(p + 4 * kMiB - 1));
}

TEST(HugePageMappingTest, RejectsEmptyAndAbsurdSizes) {
  EXPECT_EQ(HugePageMapping::Map(0).status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_EQ(HugePageMapping::Map(size_t{1} << 62).status().code(),
            absl::StatusCode::kInvalidArgument);
  HugePageArena arena;
  EXPECT_EQ(arena.Allocate(0).status().code(), absl::StatusCode::kInvalidArgument);
}

TEST(HugePageArenaTest, PiecesShareChunksAndBigOnesGetTheirOwn) {
  HugePageArena arena(4 * kMiB);
  auto a = arena.Allocate(1000);
  ASSERT_TRUE(a.ok()) << a.status();
  uint8_t* pa = a->get();
  EXPECT_EQ(Addr(pa) % kHugePageBytes, 0u);  // a fresh chunk's start
  EXPECT_TRUE(AdvisedHugePages(pa));
  // The next piece follows, 64-byte aligned, in the same chunk.
  auto b = arena.Allocate(3 * kMiB);
  ASSERT_TRUE(b.ok());
  EXPECT_EQ(b->get(), pa + 1024);
  // 2 MiB no longer fit the rest (4 MiB - 1024 - 3 MiB): a new chunk, whose
  // larger rest the next small piece uses.
  auto c = arena.Allocate(2 * kMiB);
  ASSERT_TRUE(c.ok());
  EXPECT_EQ(Addr(c->get()) % kHugePageBytes, 0u);
  EXPECT_TRUE(c->get() + 2 * kMiB <= pa || c->get() >= pa + 4 * kMiB);
  auto d = arena.Allocate(100);
  ASSERT_TRUE(d.ok());
  EXPECT_EQ(d->get(), c->get() + 2 * kMiB);
  // A piece larger than a chunk gets a mapping of its own, rounded to huge
  // pages, and leaves the current chunk current.
  auto e = arena.Allocate(9 * kMiB);
  ASSERT_TRUE(e.ok());
  EXPECT_EQ(Addr(e->get()) % kHugePageBytes, 0u);
  EXPECT_TRUE(AdvisedHugePages(e->get() + 9 * kMiB - 1));
  auto f = arena.Allocate(64);
  ASSERT_TRUE(f.ok());
  EXPECT_EQ(f->get(), d->get() + 128);
  // Every piece is zero-filled and writable.
  for (auto* piece : {&*a, &*d, &*f}) EXPECT_TRUE(AllZero(piece->get(), 64));
  std::memset(b->get(), 0xAB, 3 * kMiB);
  std::memset(e->get(), 0xCD, 9 * kMiB);
  EXPECT_EQ(pa[1023], 0);  // b did not write into a's rounding
}

TEST(HugePageArenaTest, ChunkIsUnmappedWithItsLastPiece) {
  HugePageArena arena(4 * kMiB);
  auto a = arena.Allocate(100);
  auto b = arena.Allocate(100);
  ASSERT_TRUE(a.ok() && b.ok());
  uint8_t* chunk = a->get();
  std::shared_ptr<uint8_t> copy = *a;  // a copy keeps the chunk too
  *a = nullptr;
  *b = nullptr;
  EXPECT_TRUE(Mapped(chunk));
  copy = nullptr;
  EXPECT_FALSE(Mapped(chunk));  // the arena holds nothing itself
  // And the arena goes on: a new chunk.
  auto c = arena.Allocate(100);
  ASSERT_TRUE(c.ok());
  EXPECT_TRUE(Mapped(c->get()));
}

TEST(HugePageArenaTest, ConcurrentPiecesAreDisjoint) {
  HugePageArena arena(2 * kMiB);
  constexpr int kThreads = 4, kPieces = 200;
  struct Piece {
    std::shared_ptr<uint8_t> p;
    size_t n;
    uint8_t tag;
  };
  std::vector<std::vector<Piece>> got(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      uint32_t s = 12345u + t;
      for (int i = 0; i < kPieces; ++i) {
        s = s * 1664525u + 1013904223u;
        const size_t n = 1 + (s >> 8) % 60000;
        auto p = arena.Allocate(n);
        ASSERT_TRUE(p.ok()) << p.status();
        const auto tag = static_cast<uint8_t>(1 + (t * kPieces + i) % 255);
        std::memset(p->get(), tag, n);
        got[t].push_back({*std::move(p), n, tag});
      }
    });
  }
  for (auto& th : threads) th.join();
  std::vector<const Piece*> all;
  for (const auto& v : got) {
    for (const Piece& p : v) all.push_back(&p);
  }
  ASSERT_EQ(all.size(), size_t{kThreads * kPieces});
  std::sort(all.begin(), all.end(),
            [](const Piece* x, const Piece* y) { return x->p.get() < y->p.get(); });
  for (size_t i = 0; i < all.size(); ++i) {
    EXPECT_EQ(Addr(all[i]->p.get()) % 64, 0u);
    if (i + 1 < all.size()) {
      EXPECT_LE(Addr(all[i]->p.get()) + all[i]->n, Addr(all[i + 1]->p.get()));
    }
    const uint8_t* q = all[i]->p.get();
    EXPECT_TRUE(std::all_of(q, q + all[i]->n, [&](uint8_t v) { return v == all[i]->tag; }));
  }
}

}  // namespace
}  // namespace tandem::base
