// LoopHeartbeat and WorkerHealth (common/serving/worker_health.h) on a
// SimulatedClock: an idle loop is never wedged, a busy one is once an
// iteration outlasts the timeout (not a nanosecond before), draining is
// live but not ready, and the watchdog reports each change once.

#include "common/serving/worker_health.h"

#include <utility>
#include <vector>

#include "absl/synchronization/mutex.h"
#include "common/base/clock.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"

namespace tandem::serving {
namespace {

using ::tandem::testing::Eventually;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

constexpr absl::Duration kTimeout = absl::Seconds(30);

TEST(LoopHeartbeatTest, IdleIsNeverWedged) {
  base::SimulatedClock clock;
  LoopHeartbeat loop("decode engine loop", clock);
  clock.AdvanceTime(absl::Hours(1));
  EXPECT_OK(loop.Check(kTimeout));
  loop.Beat();
  loop.Idle();
  clock.AdvanceTime(absl::Hours(1));
  EXPECT_OK(loop.Check(kTimeout));
}

TEST(LoopHeartbeatTest, AnIterationLongerThanTheTimeoutIsWedged) {
  base::SimulatedClock clock;
  LoopHeartbeat loop("prefill engine loop", clock);
  loop.Beat();
  clock.AdvanceTime(kTimeout);
  EXPECT_OK(loop.Check(kTimeout));
  clock.AdvanceTime(absl::Nanoseconds(1));
  EXPECT_THAT(loop.Check(kTimeout),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("prefill engine loop wedged: one iteration has run for 30s "
                                 "(liveness_timeout 30s)")));
  // The next iteration starts: live again.
  loop.Beat();
  EXPECT_OK(loop.Check(kTimeout));
}

TEST(WorkerHealthTest, LiveNamesTheWedgedLoopAndDrainingIsOnlyNotReady) {
  base::SimulatedClock clock;
  LoopHeartbeat decode("decode engine loop", clock);
  LoopHeartbeat other("other loop", clock);
  WorkerHealth health(kTimeout);
  health.AddLoop(&other);
  health.AddLoop(&decode);
  EXPECT_OK(health.Live());
  EXPECT_OK(health.Ready());
  decode.Beat();
  clock.AdvanceTime(kTimeout + absl::Seconds(1));
  EXPECT_THAT(health.Live(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("decode engine loop")));
  EXPECT_THAT(health.Ready(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("decode engine loop")));
  decode.Idle();
  health.SetDraining();
  EXPECT_OK(health.Live());
  EXPECT_THAT(health.Ready(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("draining")));
}

TEST(WorkerHealthTest, WatchdogReportsEachChangeOnce) {
  base::SimulatedClock clock;
  LoopHeartbeat loop("decode engine loop", clock);
  WorkerHealth health(kTimeout);
  health.AddLoop(&loop);
  absl::Mutex mu;
  std::vector<std::pair<bool, bool>> changes;  // (live, ready)
  health.StartWatchdog(absl::Milliseconds(1), [&](const absl::Status& live, const absl::Status& ready) {
    absl::MutexLock lock(&mu);
    changes.emplace_back(live.ok(), ready.ok());
  });
  auto seen = [&](size_t n) {
    return Eventually([&] {
      absl::MutexLock lock(&mu);
      return changes.size() >= n;
    }, "watchdog reports");
  };
  loop.Beat();
  clock.AdvanceTime(kTimeout + absl::Seconds(1));
  ASSERT_TRUE(seen(1));
  clock.AdvanceTime(absl::Seconds(5));  // still wedged, longer: no new report
  loop.Beat();
  ASSERT_TRUE(seen(2));
  health.SetDraining();  // reported before it returns
  health.Stop();
  clock.AdvanceTime(kTimeout * 2);
  absl::MutexLock lock(&mu);
  EXPECT_THAT(changes, ::testing::ElementsAre(std::make_pair(false, false),
                                              std::make_pair(true, true),
                                              std::make_pair(true, false)));
}

}  // namespace
}  // namespace tandem::serving
