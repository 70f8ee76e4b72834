// Worker picking: a pure function over a registry snapshot and `now`.

#include "router/picker.h"

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

const absl::Time kNow = absl::FromUnixSeconds(1000000);

WorkerInfo W(std::string address, WorkerRole role, int free_blocks = 100, int running = 0,
             int64_t queued_prefill = 0, std::string model = "m") {
  WorkerInfo w;
  w.address = std::move(address);
  w.desc.role = role;
  w.desc.model = std::move(model);
  w.desc.kv_block_size = 16;
  w.desc.context_length = 4096;
  w.desc.load.free_kv_blocks = free_blocks;
  w.desc.load.total_kv_blocks = 1000;
  w.desc.load.running_requests = running;
  w.desc.load.queued_prefill_tokens = queued_prefill;
  w.connected = true;
  w.last_heard = kNow - absl::Seconds(1);
  return w;
}

RegistrySnapshot Snap(std::vector<WorkerInfo> workers) {
  RegistrySnapshot s;
  s.heartbeat_timeout = absl::Seconds(3);
  std::sort(workers.begin(), workers.end(),
            [](const WorkerInfo& a, const WorkerInfo& b) { return a.address < b.address; });
  s.workers = std::move(workers);
  return s;
}

PickRequest Req(RoutingMode mode = RoutingMode::kAuto) {
  PickRequest r;
  r.model = "m";
  r.mode = mode;
  r.prompt_tokens = 10;
  r.max_tokens = 20;
  return r;
}

TEST(PickerTest, DecodeMostFreeBlocksThenFewestRunning) {
  RegistrySnapshot s = Snap({W("p1", WorkerRole::kPrefill), W("d1", WorkerRole::kDecode, 50, 0),
                             W("d2", WorkerRole::kDecode, 80, 5),
                             W("d3", WorkerRole::kDecode, 80, 2)});
  absl::StatusOr<RouteDecision> r = PickRoute(s, Req(), kNow);
  ASSERT_TRUE(r.ok()) << r.status();
  EXPECT_FALSE(r->colocated);
  EXPECT_EQ(r->decode->address, "d3");  // 80 free (tie with d2), fewer running
  EXPECT_EQ(r->prefill->address, "p1");
}

TEST(PickerTest, PrefillFewestQueuedTokens) {
  RegistrySnapshot s =
      Snap({W("p1", WorkerRole::kPrefill, 0, 0, 5000), W("p2", WorkerRole::kPrefill, 0, 0, 100),
            W("p3", WorkerRole::kPrefill, 0, 0, 900), W("d1", WorkerRole::kDecode)});
  EXPECT_EQ(PickRoute(s, Req(), kNow)->prefill->address, "p2");
}

TEST(PickerTest, TiesBreakByAddress) {
  RegistrySnapshot s = Snap({W("b", WorkerRole::kColocated), W("a", WorkerRole::kColocated)});
  EXPECT_EQ(PickRoute(s, Req(), kNow)->decode->address, "a");
}

TEST(PickerTest, LocalInflightSpreadsLoadBetweenReports) {
  RegistrySnapshot s = Snap({W("a", WorkerRole::kColocated, 100), W("b", WorkerRole::kColocated, 99)});
  std::map<std::string, LocalLoad> local;
  local["a"] = LocalLoad{1, 10, 2};  // this router just sent a request needing 2 blocks to a
  PickRequest r = Req();
  r.local = &local;
  EXPECT_EQ(PickRoute(s, r, kNow)->decode->address, "b");
  local["p1"] = LocalLoad{3, 3000, 0};
  RegistrySnapshot d = Snap({W("p1", WorkerRole::kPrefill, 0, 0, 0),
                             W("p2", WorkerRole::kPrefill, 0, 0, 100), W("d", WorkerRole::kDecode)});
  EXPECT_EQ(PickRoute(d, r, kNow)->prefill->address, "p2");
}

TEST(PickerTest, AutoPrefersPairsThenColocated) {
  RegistrySnapshot both = Snap({W("c", WorkerRole::kColocated), W("p", WorkerRole::kPrefill),
                                W("d", WorkerRole::kDecode)});
  EXPECT_FALSE(PickRoute(both, Req(), kNow)->colocated);
  // No decode worker: the pair is incomplete, use the colocated one.
  RegistrySnapshot no_decode = Snap({W("c", WorkerRole::kColocated), W("p", WorkerRole::kPrefill)});
  absl::StatusOr<RouteDecision> r = PickRoute(no_decode, Req(), kNow);
  ASSERT_TRUE(r.ok());
  EXPECT_TRUE(r->colocated);
  EXPECT_EQ(r->decode->address, "c");
  EXPECT_EQ(r->prefill, nullptr);
}

TEST(PickerTest, ModesRestrictTheKind) {
  RegistrySnapshot both = Snap({W("c", WorkerRole::kColocated), W("p", WorkerRole::kPrefill),
                                W("d", WorkerRole::kDecode)});
  EXPECT_TRUE(PickRoute(both, Req(RoutingMode::kColocated), kNow)->colocated);
  EXPECT_FALSE(PickRoute(both, Req(RoutingMode::kDisaggregated), kNow)->colocated);
  RegistrySnapshot only_c = Snap({W("c", WorkerRole::kColocated)});
  EXPECT_THAT(PickRoute(only_c, Req(RoutingMode::kDisaggregated), kNow),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no live prefill worker")));
}

TEST(PickerTest, SkipsDeadSilentExcludedWrongModelAndTooSmall) {
  WorkerInfo silent = W("a", WorkerRole::kColocated, 500);
  silent.last_heard = kNow - absl::Seconds(4);  // past the 3 s heartbeat timeout
  WorkerInfo disconnected = W("b", WorkerRole::kColocated, 500);
  disconnected.connected = false;
  WorkerInfo other_model = W("c", WorkerRole::kColocated, 500, 0, 0, "other");
  WorkerInfo tiny = W("d", WorkerRole::kColocated, 500);
  tiny.desc.load.total_kv_blocks = 1;  // 30 tokens need 2 blocks of 16
  WorkerInfo excluded = W("e", WorkerRole::kColocated, 500);
  WorkerInfo ok = W("f", WorkerRole::kColocated, 10);
  RegistrySnapshot s = Snap({silent, disconnected, other_model, tiny, excluded, ok});
  PickRequest r = Req();
  r.exclude = {"e"};
  absl::StatusOr<RouteDecision> d = PickRoute(s, r, kNow);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->decode->address, "f");
  // The same silent worker is fine at an earlier `now`.
  EXPECT_EQ(PickRoute(s, Req(), kNow - absl::Seconds(2))->decode->address, "a");
}

TEST(PickerTest, ContextTooSmallOnWorker) {
  WorkerInfo w = W("a", WorkerRole::kColocated);
  w.desc.context_length = 16;
  EXPECT_THAT(PickRoute(Snap({w}), Req(), kNow),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no live worker")));
}

TEST(PickerTest, NothingLiveNamesTheModelAndCounts) {
  absl::StatusOr<RouteDecision> r = PickRoute(Snap({}), Req(), kNow);
  EXPECT_THAT(r, StatusIs(absl::StatusCode::kUnavailable, HasSubstr("model 'm'")));
  EXPECT_THAT(r.status().message(), HasSubstr("0 known"));
}

TEST(PickerTest, BlocksNeeded) {
  EXPECT_EQ(BlocksNeeded(10, 20, 16), 2);
  EXPECT_EQ(BlocksNeeded(16, 16, 16), 2);
  EXPECT_EQ(BlocksNeeded(16, 17, 16), 3);
  EXPECT_EQ(BlocksNeeded(10, 20, 0), 0);
}

// --- KV-aware placement: the cost function of picker.h, table-driven -------

struct PlacementCase {
  std::string name;
  std::vector<WorkerInfo> workers;
  std::map<std::string, int32_t> cached;       // prompt tokens in each prefix cache
  std::map<std::string, LocalLoad> local;
  Placement placement = Placement::kKvAware;
  RoutingMode mode = RoutingMode::kColocated;
  std::string want;                            // the prefill (or colocated) worker
  int32_t want_cached = 0;                     // RouteDecision::expected_cached_tokens
};

// A 1000-token prompt with 20 tokens to generate: 64 blocks of 16.
std::vector<PlacementCase> PlacementCases() {
  const WorkerRole kC = WorkerRole::kColocated;
  const WorkerRole kP = WorkerRole::kPrefill;
  return {
      {"the only cached prefix wins over the address order",
       {W("a", kC), W("b", kC)}, {{"b", 800}}, {}, Placement::kKvAware,
       RoutingMode::kColocated, "b", 800},
      {"the longest cached prefix wins",
       {W("a", kC), W("b", kC), W("c", kC)}, {{"a", 320}, {"b", 800}}, {},
       Placement::kKvAware, RoutingMode::kColocated, "b", 800},
      {"a prefix beats a little more free KV and a short queue",
       // cost a = 200 + 500 = 700 < b = 1000 + 0; least load picks b (more free blocks)
       {W("a", kC, 90, 0, 500), W("b", kC, 100, 0, 0)}, {{"a", 800}}, {},
       Placement::kKvAware, RoutingMode::kColocated, "a", 800},
      {"a much longer queue loses even with the longest prefix",
       // cost a = 200 + 5000 = 5200 > b = 1000
       {W("a", kC, 100, 0, 5000), W("b", kC, 90, 0, 0)}, {{"a", 800}}, {},
       Placement::kKvAware, RoutingMode::kColocated, "b", 0},
      {"this router's requests in flight count as queue",
       {W("a", kC, 100), W("b", kC, 100)}, {{"a", 800}}, {{"a", LocalLoad{3, 3000, 0}}},
       Placement::kKvAware, RoutingMode::kColocated, "b", 0},
      {"no free KV for the request costs its wait",
       // a: 64 - 10 cached = 54 blocks needed, 0 free: 200 + 160 + 54 * 16 = 1704 > 1000
       {W("a", kC, 0, 0, 0), W("b", kC, 30, 0, 0)}, {{"a", 160}}, {},
       Placement::kKvAware, RoutingMode::kColocated, "b", 0},
      {"enough free KV for what is not cached: no penalty",
       // a: 64 - 50 = 14 blocks needed, 20 free: 200 < 1000
       {W("a", kC, 20, 0, 0), W("b", kC, 500, 0, 0)}, {{"a", 800}}, {},
       Placement::kKvAware, RoutingMode::kColocated, "a", 800},
      {"placement least_load ignores prefix caches",
       {W("a", kC, 100), W("b", kC, 100)}, {{"b", 800}}, {}, Placement::kLeastLoad,
       RoutingMode::kColocated, "a", 0},
      {"nothing cached: least load (most free blocks)",
       {W("a", kC, 50), W("b", kC, 80)}, {}, {}, Placement::kKvAware,
       RoutingMode::kColocated, "b", 0},
      {"a prefix on a dead worker only: least load",
       {W("a", kC, 50), W("b", kC, 80)}, {{"gone", 800}}, {}, Placement::kKvAware,
       RoutingMode::kColocated, "b", 0},
      {"prefill of a pair: the cached prefix wins",
       // cost p2 = 360 + 100 = 460 < p1 = 1000; least load picks p1 (queue 0)
       {W("p1", kP, 0, 0, 0), W("p2", kP, 0, 0, 100), W("d", WorkerRole::kDecode)},
       {{"p2", 640}}, {}, Placement::kKvAware, RoutingMode::kDisaggregated, "p2", 640},
      {"prefill of a pair: a long queue loses",
       {W("p1", kP, 0, 0, 0), W("p2", kP, 0, 0, 2000), W("d", WorkerRole::kDecode)},
       {{"p2", 640}}, {}, Placement::kKvAware, RoutingMode::kDisaggregated, "p1", 0},
  };
}

TEST(PickerTest, KvAwarePlacementTable) {
  for (const PlacementCase& c : PlacementCases()) {
    SCOPED_TRACE(c.name);
    std::vector<WorkerInfo> workers = c.workers;
    RegistrySnapshot s = Snap(workers);
    PickRequest r = Req(c.mode);
    r.prompt_tokens = 1000;
    r.max_tokens = 20;
    r.placement = c.placement;
    r.cached_prefix_tokens = &c.cached;
    r.local = &c.local;
    absl::StatusOr<RouteDecision> d = PickRoute(s, r, kNow);
    ASSERT_TRUE(d.ok()) << d.status();
    const WorkerInfo* chosen = c.mode == RoutingMode::kColocated ? d->decode : d->prefill;
    ASSERT_NE(chosen, nullptr);
    EXPECT_EQ(chosen->address, c.want);
    EXPECT_EQ(d->expected_cached_tokens, c.want_cached);
  }
}

TEST(PickerTest, KvAwareLeavesTheDecodeOfAPairToLeastLoad) {
  RegistrySnapshot s = Snap({W("p", WorkerRole::kPrefill), W("d1", WorkerRole::kDecode, 50),
                             W("d2", WorkerRole::kDecode, 80)});
  const std::map<std::string, int32_t> cached = {{"d1", 800}, {"p", 800}};
  PickRequest r = Req(RoutingMode::kDisaggregated);
  r.prompt_tokens = 1000;
  r.cached_prefix_tokens = &cached;
  absl::StatusOr<RouteDecision> d = PickRoute(s, r, kNow);
  ASSERT_TRUE(d.ok()) << d.status();
  EXPECT_EQ(d->decode->address, "d2");
  EXPECT_EQ(d->prefill->address, "p");
  EXPECT_EQ(d->expected_cached_tokens, 800);
}

}  // namespace
}  // namespace tandem::router
