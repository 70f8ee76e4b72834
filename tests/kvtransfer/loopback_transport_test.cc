#include "kvtransfer/loopback_transport.h"

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <memory>
#include <thread>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/notification.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/transport.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/transport_test_util.h"

namespace tandem::kvtransfer {
namespace {

using ::tandem::kvtransfer::testing::DoneRecorder;
using ::tandem::kvtransfer::testing::FillPattern;
using ::tandem::kvtransfer::testing::WaitForReceived;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

class LoopbackTransportTest : public ::testing::Test {
 protected:
  void SetUp() override {
    region_.assign(1 << 20, 0);
    auto d = receiver_.RegisterRegion(region_.data(), region_.size());
    ASSERT_OK(d.status());
    peer_ = *d;
  }

  LoopbackTransport sender_;
  LoopbackTransport receiver_;
  std::vector<uint8_t> region_;
  RegionDescriptor peer_;
};

TEST_F(LoopbackTransportTest, Capabilities) {
  const Capabilities caps = sender_.capabilities();
  EXPECT_EQ(caps.name, "loopback");
  EXPECT_TRUE(caps.native_put);
}

TransportConfig Config(const std::string& kind, const std::string& mode = "auto") {
  TransportConfig c;
  c.kind = kind;
  c.mode = mode;
  return c;
}

TEST_F(LoopbackTransportTest, MakeTransportBuildsIt) {
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<KvTransport> t, MakeTransport(Config("loopback")));
  EXPECT_EQ(t->capabilities().name, "loopback");
  EXPECT_THAT(MakeTransport(Config("carrier-pigeon")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("valid: ucx, loopback")));
  EXPECT_THAT(MakeTransport(Config("loopback", "teleport")),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("valid: auto, put, am")));
}

TEST_F(LoopbackTransportTest, WritesLandAndAreCounted) {
  std::vector<uint8_t> src(4096);
  FillPattern(src.data(), src.size(), 1);
  std::vector<WriteOp> ops = {{src.data(), 100, 1000}, {src.data() + 1000, 500000, 3096}};
  DoneRecorder done;
  ASSERT_OK(sender_.Write(peer_, 7, ops, done.Callback()));
  ASSERT_TRUE(done.Wait());
  EXPECT_OK(done.status());
  EXPECT_EQ(done.calls(), 1);
  EXPECT_EQ(std::memcmp(region_.data() + 100, src.data(), 1000), 0);
  EXPECT_EQ(std::memcmp(region_.data() + 500000, src.data() + 1000, 3096), 0);
  EXPECT_EQ(receiver_.ReceivedBytes(7), 4096u);
  EXPECT_EQ(sender_.ReceivedBytes(7), 0u);  // counted by the receiver only
  receiver_.Forget(7);
  EXPECT_EQ(receiver_.ReceivedBytes(7), 0u);
}

TEST_F(LoopbackTransportTest, AllocatedRegionTakesWrites) {
  ASSERT_OK_AND_ASSIGN(AllocatedRegion region, receiver_.AllocateRegion(8192));
  EXPECT_EQ(region.descriptor.base, reinterpret_cast<uint64_t>(region.base));
  std::vector<uint8_t> src(100, 9);
  DoneRecorder done;
  ASSERT_OK(sender_.Write(region.descriptor, 2, {{src.data(), 8000, 100}}, done.Callback()));
  ASSERT_TRUE(done.Wait());
  EXPECT_OK(done.status());
  EXPECT_EQ(std::memcmp(static_cast<uint8_t*>(region.base) + 8000, src.data(), 100), 0);
  EXPECT_EQ(static_cast<uint8_t*>(region.base)[0], 0);  // zeroed
  EXPECT_THAT(receiver_.AllocateRegion(0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 bytes")));
}

TEST_F(LoopbackTransportTest, DoneRunsOnTheProgressThreadNotInline) {
  std::vector<uint8_t> src(16, 1);
  const std::thread::id caller = std::this_thread::get_id();
  std::atomic<bool> inline_call{false};
  absl::Notification ran;
  ASSERT_OK(sender_.Write(peer_, 1, {{src.data(), 0, 16}}, [&](absl::Status) {
    inline_call = std::this_thread::get_id() == caller;
    ran.Notify();
  }));
  ASSERT_TRUE(ran.WaitForNotificationWithTimeout(absl::Seconds(10)));
  EXPECT_FALSE(inline_call);
}

TEST_F(LoopbackTransportTest, OutOfBoundsIsRejectedBeforeSending) {
  std::vector<uint8_t> src(16);
  bool called = false;
  EXPECT_THAT(sender_.Write(peer_, 1, {{src.data(), region_.size() - 8, 16}},
                            [&](absl::Status) { called = true; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside the peer's region")));
  EXPECT_THAT(sender_.Write(peer_, 1, {{nullptr, 0, 16}}, [&](absl::Status) { called = true; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null source")));
  RegionDescriptor bogus = peer_;
  bogus.worker_address = "ucx-something";
  EXPECT_THAT(sender_.Write(bogus, 1, {}, [&](absl::Status) { called = true; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("not a loopback address")));
  sender_.Shutdown();
  EXPECT_FALSE(called);
}

TEST_F(LoopbackTransportTest, DescriptorLargerThanTheRegionFailsOnTheReceiverSide) {
  std::vector<uint8_t> src(16);
  RegionDescriptor forged = peer_;
  forged.bytes = region_.size() * 2;
  DoneRecorder done;
  ASSERT_OK(sender_.Write(forged, 1, {{src.data(), region_.size() + 8, 16}}, done.Callback()));
  ASSERT_TRUE(done.Wait());
  EXPECT_THAT(done.status(),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("no registered region")));
}

TEST_F(LoopbackTransportTest, CancelledTagFailsLaterWritesUntilForgotten) {
  std::vector<uint8_t> src(16, 1);
  sender_.Cancel(5);
  DoneRecorder cancelled;
  ASSERT_OK(sender_.Write(peer_, 5, {{src.data(), 0, 16}}, cancelled.Callback()));
  ASSERT_TRUE(cancelled.Wait());
  EXPECT_THAT(cancelled.status(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("tag=5")));
  EXPECT_EQ(receiver_.ReceivedBytes(5), 0u);

  DoneRecorder other;
  ASSERT_OK(sender_.Write(peer_, 6, {{src.data(), 0, 16}}, other.Callback()));
  ASSERT_TRUE(other.Wait());
  EXPECT_OK(other.status());

  sender_.Forget(5);
  DoneRecorder again;
  ASSERT_OK(sender_.Write(peer_, 5, {{src.data(), 0, 16}}, again.Callback()));
  ASSERT_TRUE(again.Wait());
  EXPECT_OK(again.status());
}

TEST_F(LoopbackTransportTest, RefusedTagIsNeverWritten) {
  std::vector<uint8_t> src(4096, 9);
  receiver_.Refuse(8);
  DoneRecorder refused, other;
  ASSERT_OK(sender_.Write(peer_, 8, {{src.data(), 0, 4096}}, refused.Callback()));
  ASSERT_OK(sender_.Write(peer_, 9, {{src.data(), 8192, 16}}, other.Callback()));
  ASSERT_TRUE(refused.Wait());
  ASSERT_TRUE(other.Wait());
  EXPECT_OK(other.status());
  EXPECT_EQ(std::count(region_.begin(), region_.begin() + 4096, 0), 4096);
  EXPECT_EQ(receiver_.ReceivedBytes(8), 0u);
  EXPECT_FALSE(receiver_.Receiving(8));
  EXPECT_EQ(receiver_.ReceivedBytes(9), 16u);
  EXPECT_EQ(region_[8192], 9);
}

TEST_F(LoopbackTransportTest, ReceiverGoneGivesUnavailable) {
  receiver_.Shutdown();
  std::vector<uint8_t> src(16, 1);
  DoneRecorder done;
  ASSERT_OK(sender_.Write(peer_, 1, {{src.data(), 0, 16}}, done.Callback()));
  ASSERT_TRUE(done.Wait());
  EXPECT_THAT(done.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("loopback:")));
}

TEST_F(LoopbackTransportTest, ShutdownCompletesEveryWriteOnceAndRefusesNewOnes) {
  std::vector<uint8_t> src(64 << 10, 1);
  std::vector<DoneRecorder> dones(200);
  for (size_t i = 0; i < dones.size(); ++i) {
    ASSERT_OK(sender_.Write(peer_, i, {{src.data(), 0, src.size()}}, dones[i].Callback()));
  }
  sender_.Shutdown();
  // Shutdown returned: every done already ran, once. The progress thread runs
  // writes in order, so the ones that completed form a prefix, each fully
  // delivered; every later one was cut short, with nothing delivered.
  int unavailable = 0;
  for (size_t i = 0; i < dones.size(); ++i) {
    SCOPED_TRACE(absl::StrCat("write tag=", i));
    const DoneRecorder& d = dones[i];
    EXPECT_EQ(d.calls(), 1);
    if (unavailable == 0 && d.status().ok()) {
      EXPECT_EQ(receiver_.ReceivedBytes(i), src.size());
      continue;
    }
    ++unavailable;
    EXPECT_THAT(d.status(),
                StatusIs(absl::StatusCode::kUnavailable,
                         HasSubstr(absl::StrCat("write tag=", i, " to ", peer_.worker_address,
                                                ": transport shut down"))));
    EXPECT_EQ(receiver_.ReceivedBytes(i), 0u);
  }
  EXPECT_THAT(sender_.Write(peer_, 1, {}, [](absl::Status) {}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shut down")));
  sender_.Shutdown();  // idempotent
  RecordProperty("unavailable", unavailable);
}

TEST_F(LoopbackTransportTest, ManyThreadsWriting) {
  constexpr int kThreads = 4;
  constexpr int kWritesPerThread = 50;
  std::vector<uint8_t> src(1024);
  FillPattern(src.data(), src.size(), 9);
  std::vector<std::thread> threads;
  std::vector<std::vector<DoneRecorder>> dones(kThreads,
                                               std::vector<DoneRecorder>(kWritesPerThread));
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      for (int i = 0; i < kWritesPerThread; ++i) {
        const uint64_t offset = (t * kWritesPerThread + i) * 1024;
        ASSERT_OK(
            sender_.Write(peer_, 100 + t, {{src.data(), offset, 1024}}, dones[t][i].Callback()));
      }
    });
  }
  for (auto& th : threads) {
    th.join();
  }
  for (int t = 0; t < kThreads; ++t) {
    for (const DoneRecorder& d : dones[t]) {
      ASSERT_TRUE(d.Wait());
      EXPECT_OK(d.status());
    }
    EXPECT_TRUE(WaitForReceived(receiver_, 100 + t, kWritesPerThread * 1024));
  }
  for (int k = 0; k < kThreads * kWritesPerThread; ++k) {
    ASSERT_EQ(std::memcmp(region_.data() + k * 1024, src.data(), 1024), 0) << k;
  }
}

}  // namespace
}  // namespace tandem::kvtransfer
