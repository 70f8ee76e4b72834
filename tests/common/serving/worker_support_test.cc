// The clocks the workers are built on: SimulatedClock moves only when told,
// RealClock reads the wall clock. (WorkQueue: tests/common/base/work_queue_test.cc;
// request checks: tests/common/serving/request_validation_test.cc.)

#include "common/base/clock.h"
#include "gtest/gtest.h"

namespace tandem::serving {
namespace {

TEST(ClockTest, SimulatedClockMovesOnlyWhenTold) {
  base::SimulatedClock c(absl::FromUnixSeconds(100));
  EXPECT_EQ(c.Now(), absl::FromUnixSeconds(100));
  c.AdvanceTime(absl::Seconds(5));
  EXPECT_EQ(c.Now(), absl::FromUnixSeconds(105));
  EXPECT_GT(base::RealClock::Get().Now(), absl::FromUnixSeconds(1600000000));
}

}  // namespace
}  // namespace tandem::serving
