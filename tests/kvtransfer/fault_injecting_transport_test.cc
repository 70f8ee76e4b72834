#include "kvtransfer/fault_injecting_transport.h"

#include <cstdint>
#include <memory>
#include <vector>

#include "absl/status/status.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/loopback_transport.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/transport_test_util.h"

namespace tandem::kvtransfer {
namespace {

using ::tandem::kvtransfer::testing::DoneRecorder;
using ::tandem::kvtransfer::testing::FillPattern;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

class FaultInjectingTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    region_.assign(64 << 10, 0);
    ASSERT_OK_AND_ASSIGN(peer_, receiver_.RegisterRegion(region_.data(), region_.size()));
    src_.resize(4096);
    FillPattern(src_.data(), src_.size(), 3);
  }

  std::vector<WriteOp> Ops() const { return {{src_.data(), 0, src_.size()}}; }

  absl::Status WriteAndWait(TransferTag tag) {
    DoneRecorder done;
    absl::Status s = faulty_.Write(peer_, tag, Ops(), done.Callback());
    if (!s.ok()) {
      return s;
    }
    if (!done.Wait()) {
      return absl::DeadlineExceededError("done did not run");
    }
    EXPECT_EQ(done.calls(), 1);
    return done.status();
  }

  LoopbackTransport receiver_;
  FaultInjectingTransport faulty_{std::make_unique<LoopbackTransport>()};
  std::vector<uint8_t> region_;
  std::vector<uint8_t> src_;
  RegionDescriptor peer_;
};

TEST_F(FaultInjectingTransportTest, NoFaultsForwards) {
  EXPECT_OK(WriteAndWait(1));
  EXPECT_EQ(receiver_.ReceivedBytes(1), src_.size());
  EXPECT_EQ(std::memcmp(region_.data(), src_.data(), src_.size()), 0);
  EXPECT_EQ(faulty_.writes(), 1);
  EXPECT_EQ(faulty_.capabilities().name, "loopback");
}

TEST_F(FaultInjectingTransportTest, FailAfterNWrites) {
  faulty_.set_faults(FaultSpec{.fail_after_writes = 2,
                               .fail_status = absl::UnavailableError("decode-1 went away")});
  EXPECT_OK(WriteAndWait(1));
  EXPECT_OK(WriteAndWait(2));
  EXPECT_THAT(WriteAndWait(3),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("decode-1 went away")));
  EXPECT_THAT(WriteAndWait(4), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("after 2")));
  EXPECT_EQ(receiver_.ReceivedBytes(3), 0u);
  EXPECT_EQ(receiver_.ReceivedBytes(2), src_.size());
}

TEST_F(FaultInjectingTransportTest, FailAfterZeroFailsEverything) {
  faulty_.set_faults(
      FaultSpec{.fail_after_writes = 0, .fail_status = absl::ResourceExhaustedError("full")});
  EXPECT_THAT(WriteAndWait(1), StatusIs(absl::StatusCode::kResourceExhausted, HasSubstr("full")));
}

TEST_F(FaultInjectingTransportTest, DropReportsOkButWritesNothing) {
  faulty_.set_faults(FaultSpec{.drop = true});
  EXPECT_OK(WriteAndWait(1));
  absl::SleepFor(absl::Milliseconds(20));
  EXPECT_EQ(receiver_.ReceivedBytes(1), 0u);
  EXPECT_EQ(region_[0], 0);
}

TEST_F(FaultInjectingTransportTest, CorruptStatusReportsDataLoss) {
  faulty_.set_faults(FaultSpec{.corrupt_status = true});
  EXPECT_THAT(WriteAndWait(1), StatusIs(absl::StatusCode::kDataLoss, HasSubstr("OK")));
  EXPECT_EQ(receiver_.ReceivedBytes(1), src_.size());  // the bytes still went
}

TEST_F(FaultInjectingTransportTest, DelayPostponesTheWrite) {
  faulty_.set_faults(FaultSpec{.delay = absl::Milliseconds(200)});
  DoneRecorder done;
  const absl::Time start = absl::Now();
  ASSERT_OK(faulty_.Write(peer_, 1, Ops(), done.Callback()));
  EXPECT_LT(absl::Now() - start, absl::Milliseconds(100));  // Write returns at once
  EXPECT_EQ(receiver_.ReceivedBytes(1), 0u);
  ASSERT_TRUE(done.Wait());
  EXPECT_OK(done.status());
  EXPECT_GE(absl::Now() - start, absl::Milliseconds(200));
  EXPECT_EQ(receiver_.ReceivedBytes(1), src_.size());
}

TEST_F(FaultInjectingTransportTest, CancelDuringDelay) {
  faulty_.set_faults(FaultSpec{.delay = absl::Seconds(1)});
  DoneRecorder done;
  ASSERT_OK(faulty_.Write(peer_, 1, Ops(), done.Callback()));
  faulty_.Cancel(1);
  ASSERT_TRUE(done.Wait());
  EXPECT_THAT(done.status(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("tag=1")));
  EXPECT_EQ(receiver_.ReceivedBytes(1), 0u);
}

TEST_F(FaultInjectingTransportTest, ShutdownCompletesDelayedWrites) {
  faulty_.set_faults(FaultSpec{.delay = absl::Seconds(30)});
  DoneRecorder done;
  ASSERT_OK(faulty_.Write(peer_, 1, Ops(), done.Callback()));
  const absl::Time start = absl::Now();
  faulty_.Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(5));
  EXPECT_EQ(done.calls(), 1);
  EXPECT_THAT(done.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shut down")));
  EXPECT_THAT(faulty_.Write(peer_, 2, Ops(), [](absl::Status) {}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shut down")));
}

TEST_F(FaultInjectingTransportTest, ValidatesLikeEveryTransport) {
  faulty_.set_faults(FaultSpec{.drop = true});
  EXPECT_THAT(faulty_.Write(peer_, 1, {{src_.data(), region_.size(), 1}}, [](absl::Status) {}),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  EXPECT_EQ(faulty_.writes(), 0);
}

}  // namespace
}  // namespace tandem::kvtransfer
