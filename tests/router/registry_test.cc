// Worker registry liveness with an injected clock: a worker is in rotation
// from its snapshot until its stream ends or it is silent past the
// heartbeat timeout (3 s); departures are reported once.

#include "router/registry.h"

#include "common/base/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::router {
namespace {

using ::testing::ElementsAre;
using ::testing::IsEmpty;

WorkerDescription Decode(int free_blocks = 10) {
  // Initialized, not assigned: `d.model = "m"` trips GCC 12's -Wrestrict false
  // positive on std::string (GCC PR 105329 / 105651) once inlined.
  return WorkerDescription{.worker_id = "decode-1",
                           .role = WorkerRole::kDecode,
                           .model = "m",
                           .load = {.free_kv_blocks = free_blocks}};
}

class RegistryTest : public ::testing::Test {
 protected:
  RegistryTest() : clock_(absl::FromUnixSeconds(1000)), reg_(clock_, absl::Seconds(3)) {
    reg_.SetTargets({"w1:1", "w2:2"});
  }
  bool Live(const std::string& a) {
    auto snap = reg_.Snapshot();
    const WorkerInfo* w = snap->Find(a);
    return w != nullptr && snap->IsLive(*w, clock_.Now());
  }

  base::SimulatedClock clock_;
  WorkerRegistry reg_;
};

TEST_F(RegistryTest, NotLiveUntilSnapshot) {
  EXPECT_FALSE(Live("w1:1"));
  reg_.OnHeartbeat("w1:1");  // heartbeats before a snapshot don't count
  EXPECT_FALSE(Live("w1:1"));
  reg_.OnSnapshot("w1:1", Decode());
  EXPECT_TRUE(Live("w1:1"));
  EXPECT_EQ(reg_.Snapshot()->CountLive(WorkerRole::kDecode, clock_.Now()), 1);
}

TEST_F(RegistryTest, HeartbeatTimeout) {
  reg_.OnSnapshot("w1:1", Decode());
  EXPECT_THAT(reg_.TakeDeparted(), IsEmpty());
  clock_.AdvanceTime(absl::Seconds(2));
  reg_.OnHeartbeat("w1:1");
  clock_.AdvanceTime(absl::Seconds(2.9));
  EXPECT_TRUE(Live("w1:1"));  // 2.9 s since the last heartbeat
  EXPECT_THAT(reg_.TakeDeparted(), IsEmpty());
  clock_.AdvanceTime(absl::Milliseconds(200));
  EXPECT_FALSE(Live("w1:1"));  // 3.1 s: out of rotation
  EXPECT_THAT(reg_.TakeDeparted(), ElementsAre("w1:1"));
  EXPECT_THAT(reg_.TakeDeparted(), IsEmpty());  // reported once
  // A heartbeat brings it back (the stream was merely slow).
  reg_.OnHeartbeat("w1:1");
  EXPECT_TRUE(Live("w1:1"));
}

TEST_F(RegistryTest, LoadUpdatesCountAsLife) {
  reg_.OnSnapshot("w1:1", Decode(10));
  clock_.AdvanceTime(absl::Seconds(2));
  WorkerLoadInfo load;
  load.free_kv_blocks = 3;
  reg_.OnLoad("w1:1", load);
  clock_.AdvanceTime(absl::Seconds(2));
  EXPECT_TRUE(Live("w1:1"));
  EXPECT_EQ(reg_.Snapshot()->Find("w1:1")->desc.load.free_kv_blocks, 3);
}

TEST_F(RegistryTest, StreamEndLeavesRotationAtOnce) {
  reg_.OnSnapshot("w1:1", Decode());
  reg_.OnSnapshot("w2:2", Decode());
  reg_.TakeDeparted();
  reg_.OnStreamEnded("w2:2", absl::UnavailableError("connection reset"));
  EXPECT_FALSE(Live("w2:2"));
  EXPECT_TRUE(Live("w1:1"));
  EXPECT_THAT(reg_.TakeDeparted(), ElementsAre("w2:2"));
  EXPECT_EQ(reg_.Snapshot()->Find("w2:2")->last_error.code(), absl::StatusCode::kUnavailable);
  // Events after the end are ignored until a new snapshot.
  reg_.OnHeartbeat("w2:2");
  EXPECT_FALSE(Live("w2:2"));
  reg_.OnSnapshot("w2:2", Decode());
  EXPECT_TRUE(Live("w2:2"));
}

TEST_F(RegistryTest, RemovedTargetsDepart) {
  reg_.OnSnapshot("w1:1", Decode());
  reg_.TakeDeparted();
  EXPECT_THAT(reg_.SetTargets({"w2:2", "w3:3"}), ElementsAre("w3:3"));
  EXPECT_EQ(reg_.Snapshot()->Find("w1:1"), nullptr);
  EXPECT_THAT(reg_.TakeDeparted(), ElementsAre("w1:1"));
  reg_.OnSnapshot("w1:1", Decode());  // unknown now: ignored
  EXPECT_EQ(reg_.Snapshot()->workers.size(), 2u);
}

TEST_F(RegistryTest, SnapshotsAreImmutableCopies) {
  reg_.OnSnapshot("w1:1", Decode(10));
  std::shared_ptr<const RegistrySnapshot> before = reg_.Snapshot();
  WorkerLoadInfo load;
  load.free_kv_blocks = 1;
  reg_.OnLoad("w1:1", load);
  EXPECT_EQ(before->Find("w1:1")->desc.load.free_kv_blocks, 10);
  EXPECT_EQ(reg_.Snapshot()->Find("w1:1")->desc.load.free_kv_blocks, 1);
}

// --- the prefix index follows each worker's stream ----------------------

WorkerDescription Colocated() {
  return WorkerDescription{.worker_id = "colocated-1",
                           .role = WorkerRole::kColocated,
                           .model = "m",
                           .kv_block_size = 4,
                           .load = {},
                           .kv_model_id = 9};
}

std::vector<int32_t> Tokens(int n) {
  std::vector<int32_t> v(n);
  for (int i = 0; i < n; ++i) v[i] = 100 + i;
  return v;
}

// Prompt tokens of Tokens(n) that `address` holds by the registry's index.
int32_t Cached(const WorkerRegistry& reg, const std::string& address, int n) {
  std::shared_ptr<const RegistrySnapshot> snap = reg.Snapshot();
  if (snap->prefixes == nullptr) {
    return -1;
  }
  std::map<std::string, int32_t> m = snap->prefixes->CachedPrefixTokens(Tokens(n));
  auto it = m.find(address);
  return it == m.end() ? 0 : it->second;
}

TEST_F(RegistryTest, PrefixIndexFollowsSnapshotEventsAndDepartures) {
  const std::vector<uint64_t> names =
      PromptBlockHashes(Tokens(12), PrefixIndex::Naming{9, 4}, 3);
  ASSERT_EQ(names.size(), 3u);
  reg_.OnBlocks("w1:1", false, names, {});  // before any snapshot: ignored
  EXPECT_EQ(Cached(reg_, "w1:1", 13), 0);
  reg_.OnSnapshot("w1:1", Colocated(), absl::MakeConstSpan(names).subspan(0, 1));
  EXPECT_EQ(Cached(reg_, "w1:1", 13), 4);
  reg_.OnBlocks("w1:1", false, absl::MakeConstSpan(names).subspan(1), {});
  EXPECT_EQ(Cached(reg_, "w1:1", 13), 12);
  EXPECT_EQ(Cached(reg_, "w1:1", 12), 8);  // one prompt token is always computed
  reg_.OnBlocks("w1:1", false, {}, absl::MakeConstSpan(names).subspan(1, 1));  // evicted
  EXPECT_EQ(Cached(reg_, "w1:1", 13), 4);
  reg_.OnBlocks("w1:1", true, names, {});  // resync: the whole set
  EXPECT_EQ(Cached(reg_, "w1:1", 13), 12);
  // The stream ends: the worker's entry goes with it, and a new stream's
  // snapshot starts it again from the set it carries.
  reg_.OnStreamEnded("w1:1", absl::UnavailableError("gone"));
  EXPECT_EQ(Cached(reg_, "w1:1", 13), 0);
  EXPECT_EQ(reg_.prefixes().num_workers(), 0);
  reg_.OnSnapshot("w1:1", Colocated(), names);
  EXPECT_EQ(Cached(reg_, "w1:1", 13), 12);
  // Silent past the heartbeat timeout: dropped when its departure is taken.
  EXPECT_THAT(reg_.TakeDeparted(), IsEmpty());
  clock_.AdvanceTime(absl::Seconds(4));
  EXPECT_THAT(reg_.TakeDeparted(), ElementsAre("w1:1"));
  EXPECT_EQ(Cached(reg_, "w1:1", 13), 0);
  // Removed from discovery.
  reg_.OnSnapshot("w2:2", Colocated(), names);
  EXPECT_EQ(Cached(reg_, "w2:2", 13), 12);
  reg_.SetTargets({"w1:1"});
  EXPECT_EQ(Cached(reg_, "w2:2", 13), 0);
  EXPECT_EQ(reg_.prefixes().num_workers(), 0);
}

}  // namespace
}  // namespace tandem::router
