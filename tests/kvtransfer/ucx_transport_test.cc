// UcxTransport against real UCX: two transports in this process (two
// workers), and a receiver (or sender) in a child process spoken to over a
// pipe (tests/kvtransfer/ucx_transport_peer.cc). Every test runs for
// ucx_tls "sm" (sysv/posix shared memory + cma) and "tcp" (on lo), in put and
// am mode.
//
// Known gaps: no RDMA NIC here, so native puts (the "rma" lane) are not
// exercised; Cancel of a request UCX already handed to the wire is best
// effort and only checked to complete exactly once.

#include "kvtransfer/ucx_transport.h"

#include <signal.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "absl/status/status.h"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/internal/ucx_util.h"
#include "kvtransfer/transport.h"
#include "tests/testing/child_process.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/transport_test_util.h"

namespace tandem::kvtransfer {
namespace {

using ::tandem::kvtransfer::testing::DoneRecorder;
using ::tandem::kvtransfer::testing::FillPattern;
using ::tandem::kvtransfer::testing::Fingerprint;
using ::tandem::kvtransfer::testing::WaitForReceived;
using ::tandem::kvtransfer::testing::WriteAndWaitOk;
using ::tandem::testing::ChildOptions;
using ::tandem::testing::ChildProcess;
using ::tandem::testing::StatusIs;
using ::testing::AnyOf;
using ::testing::HasSubstr;

constexpr uint64_t kMiB = 1 << 20;

struct Param {
  std::string tls;
  std::string mode;
};

void PrintTo(const Param& p, std::ostream* os) { *os << p.tls << "/" << p.mode; }

// The UCX peer (tests/kvtransfer/ucx_transport_peer.cc) as a child process
// spoken to line by line over its stdin and stdout; its stderr is ours.
absl::StatusOr<std::unique_ptr<ChildProcess>> StartPeerProcess(std::vector<std::string> args) {
  ChildOptions options;
  options.argv = {TANDEM_UCX_PEER_BIN};
  options.argv.insert(options.argv.end(), args.begin(), args.end());
  options.stdin_pipe = true;
  return ChildProcess::Start(std::move(options));
}

TransportConfig ConfigFor(const Param& p) {
  return TransportConfig{.kind = "ucx",
                         .mode = p.mode,
                         .ucx_tls = p.tls,
                         .ucx_net_devices = p.tls == "tcp" ? "lo" : ""};
}

// `n` ops with random sizes in [1, max_op] at random, disjoint, unaligned
// offsets of a region of `region_bytes`, reading from `src` (>= region).
std::vector<WriteOp> RandomOps(std::mt19937_64& rng, const uint8_t* src, uint64_t region_bytes,
                               int n, uint64_t max_op) {
  std::vector<WriteOp> ops;
  uint64_t off = 0;
  for (int i = 0; i < n; ++i) {
    off += rng() % 4096;  // gap
    const uint64_t bytes = 1 + rng() % max_op;
    if (off + bytes > region_bytes) {
      break;
    }
    ops.push_back(WriteOp{src + off, off, bytes});
    off += bytes;
  }
  std::shuffle(ops.begin(), ops.end(), rng);
  return ops;
}

// What the region should hold after `ops` landed in a zeroed region.
std::vector<uint8_t> Expected(uint64_t region_bytes, const std::vector<WriteOp>& ops) {
  std::vector<uint8_t> want(region_bytes, 0);
  for (const WriteOp& op : ops) {
    std::memcpy(want.data() + op.remote_offset, static_cast<const uint8_t*>(op.src), op.bytes);
  }
  return want;
}

uint64_t Total(const std::vector<WriteOp>& ops) {
  uint64_t t = 0;
  for (const WriteOp& op : ops) {
    t += op.bytes;
  }
  return t;
}

class UcxTransportTest : public ::testing::TestWithParam<Param> {
 protected:
  void SetUp() override {
    ASSERT_OK_AND_ASSIGN(sender_, UcxTransport::Create(ConfigFor(GetParam())));
    ASSERT_OK_AND_ASSIGN(receiver_, UcxTransport::Create(ConfigFor(GetParam())));
  }

  // Registers a zeroed region of `bytes` on the receiver.
  RegionDescriptor MakeRegion(uint64_t bytes) {
    region_.assign(bytes, 0);
    absl::StatusOr<RegionDescriptor> d = receiver_->RegisterRegion(region_.data(), bytes);
    EXPECT_OK(d.status());
    return d.ok() ? *d : RegionDescriptor{};
  }

  // A receiver in a child process; returns its descriptor. `allocate`: the
  // receiver's region comes from its AllocateRegion.
  absl::StatusOr<RegionDescriptor> StartPeer(uint64_t region_bytes, bool allocate = false) {
    std::vector<std::string> args = {"receiver", GetParam().tls, absl::StrCat(region_bytes)};
    if (allocate) {
      args.push_back("alloc");
    }
    absl::StatusOr<std::unique_ptr<ChildProcess>> p = StartPeerProcess(std::move(args));
    if (!p.ok()) {
      return p.status();
    }
    peer_ = std::move(*p);
    absl::StatusOr<std::string> line = peer_->ReadLine();
    if (!line.ok()) {
      return line.status();
    }
    RegionDescriptor d;
    if (!testing::ParseDescriptorLine(*line, &d)) {
      return absl::InternalError(absl::StrCat("bad descriptor line: ", *line));
    }
    return d;
  }

  // Asks the peer to wait for `bytes` of `tag`; returns what it saw.
  uint64_t PeerReceived(TransferTag tag, uint64_t bytes) {
    return AskPeerNumber(absl::StrCat("WAIT ", tag, " ", bytes, " 60000"), absl::Seconds(90));
  }

  uint64_t PeerFingerprint(uint64_t offset, uint64_t length) {
    return AskPeerNumber(absl::StrCat("HASH ", offset, " ", length));
  }

  // Sends `command` to the peer and returns the number in its "<word> <n>" reply.
  uint64_t AskPeerNumber(const std::string& command, absl::Duration timeout = absl::Seconds(60)) {
    absl::StatusOr<std::string> r = peer_->Ask(command, timeout);
    EXPECT_OK(r.status());
    uint64_t n = 0;
    if (r.ok()) {
      std::vector<std::string> f = absl::StrSplit(*r, ' ');
      EXPECT_TRUE(f.size() == 2 && absl::SimpleAtoi(f[1], &n)) << *r;
    }
    return n;
  }

  // The region outlives both transports (members are destroyed in reverse
  // order): a message still in flight at teardown lands in live memory.
  std::vector<uint8_t> region_;
  std::unique_ptr<UcxTransport> sender_;
  std::unique_ptr<UcxTransport> receiver_;
  std::unique_ptr<ChildProcess> peer_;
};

TEST_P(UcxTransportTest, CapabilitiesFollowTheModeAndTheLanes) {
  EXPECT_EQ(sender_->capabilities().name, "ucx");
  const RegionDescriptor peer = MakeRegion(4096);
  std::vector<uint8_t> src(16, 1);
  ASSERT_TRUE(WriteAndWaitOk(*sender_, peer, 1, {{src.data(), 0, 16}}));
  const Capabilities caps = sender_->capabilities();
  EXPECT_EQ(caps.native_put, GetParam().mode == "put");
  if (GetParam().tls == "tcp") {
    EXPECT_EQ(caps.transports, "tcp");
  } else {
    EXPECT_THAT(caps.transports, AnyOf(HasSubstr("sysv"), HasSubstr("posix"), HasSubstr("cma")));
    EXPECT_THAT(caps.transports, ::testing::Not(HasSubstr("tcp")));
  }
}

TEST_P(UcxTransportTest, ManyRandomOpsLandExactly) {
  const uint64_t kRegion = 16 * kMiB;
  const RegionDescriptor peer = MakeRegion(kRegion);
  const uint64_t seed = 1234;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> src(kRegion);
  FillPattern(src.data(), src.size(), seed);
  std::vector<WriteOp> ops = RandomOps(rng, src.data(), kRegion, 400, 64 << 10);
  ASSERT_GT(ops.size(), 100u);
  const std::vector<uint8_t> want = Expected(kRegion, ops);
  const uint64_t total = Total(ops);
  DoneRecorder done;
  ASSERT_OK(sender_->Write(peer, 7, ops, done.Callback()));
  ASSERT_TRUE(done.Wait());
  ASSERT_OK(done.status());
  ASSERT_TRUE(WaitForReceived(*receiver_, 7, total));
  EXPECT_EQ(receiver_->ReceivedBytes(7), total);
  EXPECT_TRUE(region_ == want) << "seed " << seed;
  EXPECT_EQ(done.calls(), 1);
}

TEST_P(UcxTransportTest, SizesFromOneByteTo64MiB) {
  const uint64_t kRegion = 68 * kMiB;
  const RegionDescriptor peer = MakeRegion(kRegion);
  std::vector<uint8_t> src(kRegion);
  FillPattern(src.data(), src.size(), 99);
  // Unaligned sizes spanning UCX's eager, zcopy and rendezvous protocols.
  const std::vector<uint64_t> sizes = {1, 3, 93, 94, 4095, 8193, 20553, 65537, kMiB + 3, kMiB - 5};
  std::vector<WriteOp> small;
  uint64_t off = 1;
  for (uint64_t s : sizes) {
    small.push_back({src.data() + off + 7, off, s});  // source and target both unaligned
    off += s + 13;
  }
  const WriteOp big{src.data() + off + 1, off, 64 * kMiB};
  ASSERT_LE(off + 1 + 64 * kMiB, kRegion);
  DoneRecorder d1, d2;
  ASSERT_OK(sender_->Write(peer, 1, small, d1.Callback()));
  ASSERT_OK(sender_->Write(peer, 2, {big}, d2.Callback()));
  ASSERT_TRUE(d1.Wait());
  ASSERT_TRUE(d2.Wait());
  ASSERT_OK(d1.status());
  ASSERT_OK(d2.status());
  ASSERT_TRUE(WaitForReceived(*receiver_, 1, Total(small)));
  ASSERT_TRUE(WaitForReceived(*receiver_, 2, 64 * kMiB));
  std::vector<WriteOp> all = small;
  all.push_back(big);
  EXPECT_TRUE(region_ == Expected(kRegion, all));
}

TEST_P(UcxTransportTest, OutOfBoundsOpIsRejectedBeforeSending) {
  const RegionDescriptor peer = MakeRegion(4096);
  std::vector<uint8_t> src(8192, 1);
  bool called = false;
  EXPECT_THAT(sender_->Write(peer, 1, {{src.data(), 0, 16}, {src.data(), 4000, 97}},
                             [&](absl::Status) { called = true; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("op 1 [4000, 4097)")));
  EXPECT_THAT(sender_->Write(peer, 1, {{src.data(), UINT64_MAX - 1, 4}},
                             [&](absl::Status) { called = true; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("outside")));
  RegionDescriptor bad = peer;
  bad.worker_address = "not an address";
  EXPECT_THAT(sender_->Write(bad, 1, {{src.data(), 0, 16}}, [&](absl::Status) { called = true; }),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("worker address")));
  sender_->Shutdown();
  EXPECT_FALSE(called);
  EXPECT_EQ(region_[0], 0);
}

TEST_P(UcxTransportTest, EmptyWriteCompletesOk) {
  const RegionDescriptor peer = MakeRegion(4096);
  ASSERT_TRUE(WriteAndWaitOk(*sender_, peer, 1, {}));
}

TEST_P(UcxTransportTest, ReceivedBytesCountsPerTagAndForgets) {
  const RegionDescriptor peer = MakeRegion(4 * kMiB);
  std::vector<uint8_t> src(4 * kMiB);
  FillPattern(src.data(), src.size(), 5);
  DoneRecorder a, b;
  // Tag 10: 3 ops; tag 11: 2 ops, interleaved in one region.
  ASSERT_OK(sender_->Write(
      peer, 10,
      {{src.data(), 0, 1000}, {src.data() + 2000, 2000, 300000}, {src.data() + kMiB, kMiB, kMiB}},
      a.Callback()));
  ASSERT_OK(sender_->Write(peer, 11,
                           {{src.data() + 3 * kMiB, 3 * kMiB, 77},
                            {src.data() + 3 * kMiB + 100, 3 * kMiB + 100, 500000}},
                           b.Callback()));
  ASSERT_TRUE(a.Wait());
  ASSERT_TRUE(b.Wait());
  ASSERT_OK(a.status());
  ASSERT_OK(b.status());
  ASSERT_TRUE(WaitForReceived(*receiver_, 10, 1000 + 300000 + kMiB));
  ASSERT_TRUE(WaitForReceived(*receiver_, 11, 77 + 500000));
  absl::SleepFor(absl::Milliseconds(20));  // nothing more arrives
  EXPECT_EQ(receiver_->ReceivedBytes(10), 1000 + 300000 + kMiB);
  EXPECT_EQ(receiver_->ReceivedBytes(11), 77u + 500000u);
  EXPECT_EQ(receiver_->ReceivedBytes(12), 0u);
  EXPECT_EQ(sender_->ReceivedBytes(10), 0u);
  receiver_->Forget(10);
  EXPECT_EQ(receiver_->ReceivedBytes(10), 0u);
  EXPECT_EQ(receiver_->ReceivedBytes(11), 77u + 500000u);
}

// A receiver's refused tag: message-mode writes never reach the region
// (eager and rendezvous sizes), put-mode ones are not counted; other tags
// are untouched.
TEST_P(UcxTransportTest, RefusedTagIsNeverWrittenInMessageMode) {
  const RegionDescriptor peer = MakeRegion(4 * kMiB);
  std::vector<uint8_t> src(4 * kMiB);
  FillPattern(src.data(), src.size(), 21);
  receiver_->Refuse(20);
  DoneRecorder refused, other;
  ASSERT_OK(sender_->Write(peer, 20, {{src.data(), 0, 100}, {src.data() + kMiB, kMiB, 2 * kMiB}},
                           refused.Callback()));
  ASSERT_TRUE(refused.Wait());  // OK or an error: the point is that it ends
  ASSERT_OK(sender_->Write(peer, 21, {{src.data() + 3 * kMiB, 3 * kMiB, 4096}}, other.Callback()));
  ASSERT_TRUE(other.Wait());
  ASSERT_OK(other.status());
  ASSERT_TRUE(WaitForReceived(*receiver_, 21, 4096));
  absl::SleepFor(absl::Milliseconds(50));  // anything late would have landed
  EXPECT_EQ(receiver_->ReceivedBytes(20), 0u);
  EXPECT_FALSE(receiver_->Receiving(20));
  EXPECT_EQ(std::memcmp(region_.data() + 3 * kMiB, src.data() + 3 * kMiB, 4096), 0);
  if (GetParam().mode == "am") {
    EXPECT_EQ(std::count(region_.begin(), region_.begin() + 3 * kMiB, 0), 3 * kMiB)
        << "refused bytes reached the region";
  }
}

TEST_P(UcxTransportTest, CancelledTagFailsLaterWritesUntilForgotten) {
  const RegionDescriptor peer = MakeRegion(4096);
  std::vector<uint8_t> src(16, 1);
  sender_->Cancel(3);
  DoneRecorder cancelled;
  ASSERT_OK(sender_->Write(peer, 3, {{src.data(), 0, 16}}, cancelled.Callback()));
  ASSERT_TRUE(cancelled.Wait());
  EXPECT_THAT(cancelled.status(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("tag=3")));
  EXPECT_EQ(region_[0], 0);
  sender_->Forget(3);
  ASSERT_TRUE(WriteAndWaitOk(*sender_, peer, 3, {{src.data(), 0, 16}}));
}

TEST_P(UcxTransportTest, CancelInFlight) {
  const uint64_t kRegion = 64 * kMiB;
  const RegionDescriptor peer = MakeRegion(kRegion);
  std::vector<uint8_t> src(kRegion, 0x5a);
  std::vector<WriteOp> ops;
  for (uint64_t off = 0; off < kRegion; off += 256 << 10) {
    ops.push_back({src.data() + off, off, 256 << 10});
  }
  DoneRecorder done;
  ASSERT_OK(sender_->Write(peer, 9, ops, done.Callback()));
  sender_->Cancel(9);
  ASSERT_TRUE(done.Wait());
  EXPECT_THAT(done.status(), StatusIs(absl::StatusCode::kCancelled, HasSubstr("tag=9")));
  EXPECT_EQ(done.calls(), 1);
  absl::SleepFor(absl::Milliseconds(50));
  EXPECT_LT(receiver_->ReceivedBytes(9), kRegion);  // the tail was never sent

  // The transport is still fine.
  ASSERT_TRUE(WriteAndWaitOk(*sender_, peer, 10, {{src.data(), 0, 4096}}));
}

TEST_P(UcxTransportTest, ShutdownWithPendingWrites) {
  const uint64_t kRegion = 8 * kMiB;
  const RegionDescriptor peer = MakeRegion(kRegion);
  std::vector<uint8_t> src(kRegion, 1);
  std::vector<DoneRecorder> dones(16);
  for (size_t i = 0; i < dones.size(); ++i) {
    std::vector<WriteOp> ops;
    for (uint64_t off = 0; off < kRegion; off += kMiB) {
      ops.push_back({src.data() + off, off, kMiB});
    }
    ASSERT_OK(sender_->Write(peer, i, std::move(ops), dones[i].Callback()));
  }
  const absl::Time start = absl::Now();
  sender_->Shutdown();
  EXPECT_LT(absl::Now() - start, absl::Seconds(10));
  int unavailable = 0;
  for (const DoneRecorder& d : dones) {
    EXPECT_EQ(d.calls(), 1);
    if (!d.status().ok()) {
      EXPECT_THAT(d.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shut down")));
      ++unavailable;
    }
  }
  EXPECT_GT(unavailable, 0);
  EXPECT_THAT(sender_->Write(peer, 99, {{src.data(), 0, 1}}, [](absl::Status) {}),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("shut down")));
  sender_->Shutdown();  // idempotent
}

TEST_P(UcxTransportTest, RegisterRegionRejectsBadRegions) {
  std::vector<uint8_t> mem(8192);
  EXPECT_THAT(receiver_->RegisterRegion(nullptr, 10),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("null or empty")));
  ASSERT_OK(receiver_->RegisterRegion(mem.data(), 4096).status());
  EXPECT_THAT(receiver_->RegisterRegion(mem.data() + 100, 4096),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("overlaps")));
  EXPECT_OK(receiver_->RegisterRegion(mem.data() + 4096, 4096).status());
  EXPECT_OK(sender_->RegisterSource(mem.data(), mem.size()));
}

TEST_P(UcxTransportTest, RegisteredSourceWorks) {
  const RegionDescriptor peer = MakeRegion(4 * kMiB);
  std::vector<uint8_t> src(4 * kMiB);
  FillPattern(src.data(), src.size(), 8);
  ASSERT_OK(sender_->RegisterSource(src.data(), src.size()));
  ASSERT_TRUE(WriteAndWaitOk(*sender_, peer, 1, {{src.data(), 0, src.size()}}));
  ASSERT_TRUE(WaitForReceived(*receiver_, 1, src.size()));
  EXPECT_TRUE(region_ == src);
}

TEST_P(UcxTransportTest, AllocatedRegionTakesWrites) {
  const uint64_t kRegion = 8 * kMiB;
  ASSERT_OK_AND_ASSIGN(AllocatedRegion region, receiver_->AllocateRegion(kRegion));
  ASSERT_NE(region.base, nullptr);
  EXPECT_EQ(region.descriptor.bytes, kRegion);
  EXPECT_EQ(region.descriptor.base, reinterpret_cast<uint64_t>(region.base));
  std::memset(region.base, 0, kRegion);
  const uint64_t seed = 31;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> src(kRegion);
  FillPattern(src.data(), src.size(), seed);
  const std::vector<WriteOp> ops = RandomOps(rng, src.data(), kRegion, 200, 128 << 10);
  ASSERT_TRUE(WriteAndWaitOk(*sender_, region.descriptor, 4, ops));
  ASSERT_TRUE(WaitForReceived(*receiver_, 4, Total(ops)));
  const std::vector<uint8_t> want = Expected(kRegion, ops);
  EXPECT_EQ(std::memcmp(region.base, want.data(), kRegion), 0) << "seed " << seed;
  EXPECT_THAT(receiver_->AllocateRegion(0),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("0 bytes")));
}

// --- across processes ----------------------------------------------------------

TEST_P(UcxTransportTest, CrossProcessWritesLandExactly) {
  const uint64_t kRegion = 32 * kMiB;
  ASSERT_OK_AND_ASSIGN(const RegionDescriptor peer, StartPeer(kRegion));
  const uint64_t seed = 777;
  std::mt19937_64 rng(seed);
  std::vector<uint8_t> src(kRegion);
  FillPattern(src.data(), src.size(), seed);
  std::vector<WriteOp> ops = RandomOps(rng, src.data(), kRegion, 300, 256 << 10);
  ops.push_back({src.data() + kRegion - 5 * kMiB, kRegion - 5 * kMiB, 5 * kMiB});  // one large
  const std::vector<uint8_t> want = Expected(kRegion, ops);
  ASSERT_TRUE(WriteAndWaitOk(*sender_, peer, 21, ops));
  EXPECT_EQ(PeerReceived(21, Total(ops)), Total(ops));
  EXPECT_EQ(PeerFingerprint(0, kRegion), Fingerprint(want.data(), want.size())) << "seed " << seed;
}

TEST_P(UcxTransportTest, ReceiverKilledMidTransferFailsWithinFiveSeconds) {
  const uint64_t kRegion = 64 * kMiB;
  ASSERT_OK_AND_ASSIGN(const RegionDescriptor peer, StartPeer(kRegion));
  std::vector<uint8_t> src(kRegion, 3);
  auto whole_region = [&] {
    std::vector<WriteOp> ops;
    for (uint64_t off = 0; off < kRegion; off += kMiB) {
      ops.push_back({src.data() + off, off, kMiB});
    }
    return ops;
  };
  DoneRecorder first;  // connects
  ASSERT_OK(sender_->Write(peer, 0, whole_region(), first.Callback()));
  ASSERT_TRUE(first.Wait());
  ASSERT_OK(first.status());

  std::vector<DoneRecorder> dones(20);  // 1.3 GB: still going when the peer dies
  for (size_t i = 0; i < dones.size(); ++i) {
    ASSERT_OK(sender_->Write(peer, i + 1, whole_region(), dones[i].Callback()));
  }
  absl::SleepFor(absl::Milliseconds(5));
  peer_->Kill();
  const absl::Time killed = absl::Now();
  int unavailable = 0;
  for (const DoneRecorder& d : dones) {
    ASSERT_TRUE(d.Wait(absl::Seconds(5) - (absl::Now() - killed))) << "a write to a dead peer hung";
    EXPECT_EQ(d.calls(), 1);
    if (!d.status().ok()) {
      EXPECT_THAT(d.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr(":")));
      ++unavailable;
    }
  }
  EXPECT_LT(absl::Now() - killed, absl::Seconds(5));
  EXPECT_GT(unavailable, 0);

  // A later write to the dead peer fails fast too.
  DoneRecorder later;
  const absl::Time t = absl::Now();
  ASSERT_OK(sender_->Write(peer, 100, {{src.data(), 0, 4096}}, later.Callback()));
  ASSERT_TRUE(later.Wait(absl::Seconds(5)));
  EXPECT_THAT(later.status(), StatusIs(absl::StatusCode::kUnavailable, HasSubstr("peer")));
  EXPECT_LT(absl::Now() - t, absl::Seconds(5));
}

// A sender killed mid-transfer must not take the receiver (a decode worker)
// with it. UCX 1.13 keeps that promise only where the dying sender's data
// does not pass through the receiver's UCX protocol state:
//  - emulated puts (mode put over tcp, or over sm into memory UCX did not
//    allocate): the receiver acknowledges each put from its progress thread
//    and aborts ("Fatal: unexpected error: Endpoint timeout" in
//    ucp_put_handler) when the sender is gone;
//  - active messages over sm: a sender killed while writing a shared-memory
//    FIFO element leaves it half-written, and the receiver's FIFO stalls for
//    every sender after it (no timeout; sysv/posix have no peer-failure
//    handling in 1.13).
// Those combinations are skipped here and listed as known gaps. What works:
// am over tcp, and over sm puts into an AllocateRegion region (auto mode:
// a memcpy into mapped memory; only the small landed notices use the FIFO).
TEST_P(UcxTransportTest, ReceiverSurvivesASenderKilledMidTransfer) {
  const bool sm = GetParam().tls == "sm";
  if (GetParam().mode == "put" && !sm) {
    GTEST_SKIP() << "UCX 1.13: the receiver of emulated puts aborts when their sender dies";
  }
  if (GetParam().mode == "am" && sm) {
    GTEST_SKIP() << "UCX 1.13: a sender killed mid-message can stall a shared-memory FIFO";
  }
  // sm/put runs as sm with auto mode into an allocated region (native puts).
  const std::string sender_mode = sm ? "auto" : GetParam().mode;
  const uint64_t kRegion = 16 * kMiB;
  ASSERT_OK_AND_ASSIGN(const RegionDescriptor peer, StartPeer(kRegion, /*allocate=*/sm));
  ASSERT_OK_AND_ASSIGN(
      std::unique_ptr<ChildProcess> doomed,
      StartPeerProcess({"sender", GetParam().tls, sender_mode}));
  ASSERT_OK(doomed->Send(testing::DescriptorLine(peer)));
  ASSERT_OK_AND_ASSIGN(std::string wrote, doomed->ReadLine());
  EXPECT_EQ(wrote, "WROTE 0 OK");
  ASSERT_OK_AND_ASSIGN(wrote, doomed->ReadLine());  // mid-stream now
  doomed->Kill();

  // The receiver still takes writes from a new sender.
  std::vector<uint8_t> src(kRegion);
  FillPattern(src.data(), src.size(), 11);
  std::unique_ptr<UcxTransport> sender = std::move(sender_);
  if (sm) {
    ASSERT_OK_AND_ASSIGN(sender, UcxTransport::Create(ConfigFor({"sm", "auto"})));
  }
  DoneRecorder done;
  ASSERT_OK(sender->Write(peer, 1000, {{src.data(), 0, kRegion}}, done.Callback()));
  ASSERT_TRUE(done.Wait(absl::Seconds(30)));
  ASSERT_OK(done.status());
  EXPECT_EQ(sm, sender->capabilities().native_put);
  EXPECT_EQ(PeerReceived(1000, kRegion), kRegion);
  EXPECT_EQ(PeerFingerprint(0, kRegion), Fingerprint(src.data(), src.size()));
}

INSTANTIATE_TEST_SUITE_P(Transports, UcxTransportTest,
                         ::testing::Values(Param{"sm", "put"}, Param{"sm", "am"},
                                           Param{"tcp", "put"}, Param{"tcp", "am"}),
                         [](const ::testing::TestParamInfo<Param>& info) {
                           return info.param.tls + "_" + info.param.mode;
                         });

// --- not parameterized -----------------------------------------------------------

TEST(UcxTransportConfigTest, AutoModePicksActiveMessagesWithoutAnRmaLane) {
  // UCX 1.13 does puts natively only over RDMA (an "rma" lane); neither tcp
  // nor its shared-memory transports have one.
  for (const std::string tls : {"sm", "tcp"}) {
    ASSERT_OK_AND_ASSIGN(auto a, UcxTransport::Create(ConfigFor({tls, "auto"})));
    ASSERT_OK_AND_ASSIGN(auto b, UcxTransport::Create(ConfigFor({tls, "auto"})));
    std::vector<uint8_t> region(4096), src(4096, 7);
    ASSERT_OK_AND_ASSIGN(RegionDescriptor peer, b->RegisterRegion(region.data(), region.size()));
    ASSERT_TRUE(WriteAndWaitOk(*a, peer, 1, {{src.data(), 0, 4096}}));
    EXPECT_FALSE(a->capabilities().native_put) << tls;
    ASSERT_TRUE(WaitForReceived(*b, 1, 4096));
    EXPECT_EQ(region, src);
  }
}

TEST(UcxTransportConfigTest, AutoModePutsIntoSharedMemoryRegions) {
  // A region UCX allocated in shared memory is mapped by a same-host sender
  // (ucp_rkey_ptr), so auto puts into it; over tcp it still sends.
  for (const std::string tls : {"sm", "tcp"}) {
    ASSERT_OK_AND_ASSIGN(auto a, UcxTransport::Create(ConfigFor({tls, "auto"})));
    ASSERT_OK_AND_ASSIGN(auto b, UcxTransport::Create(ConfigFor({tls, "auto"})));
    ASSERT_OK_AND_ASSIGN(AllocatedRegion region, b->AllocateRegion(kMiB));
    std::vector<uint8_t> src(kMiB);
    FillPattern(src.data(), src.size(), 2);
    ASSERT_TRUE(WriteAndWaitOk(*a, region.descriptor, 1, {{src.data(), 0, kMiB}}));
    EXPECT_EQ(a->capabilities().native_put, tls == "sm") << tls;
    ASSERT_TRUE(WaitForReceived(*b, 1, kMiB));
    EXPECT_EQ(std::memcmp(region.base, src.data(), kMiB), 0) << tls;
  }
}

TEST(UcxTransportConfigTest, BadConfigIsRejected) {
  EXPECT_THAT(UcxTransport::Create(ConfigFor({"tcp", "fast"})),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("valid: auto, put, am")));
  TransportConfig nccl = ConfigFor({"tcp", "auto"});
  nccl.kind = "nccl";
  EXPECT_THAT(MakeTransport(nccl),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("valid: ucx, loopback")));
  ASSERT_OK_AND_ASSIGN(auto t, MakeTransport(ConfigFor({"tcp", "auto"})));
  EXPECT_EQ(t->capabilities().name, "ucx");
  TransportConfig bad_tls = ConfigFor({"no_such_transport", "auto"});
  EXPECT_THAT(MakeTransport(bad_tls),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("no_such_transport")));
}

// --- internal helpers -----------------------------------------------------------

TEST(UcxUtilTest, ParsesEndpointLanes) {
  const internal::LaneInfo sm = internal::ParseEndpointInfo(
      "#\n# UCP endpoint \n#\n#               peer: <no debug data>\n"
      "#                 lane[0]:  0:sysv/memory.0 md[0]           -> md[0]/sysv/sysdev[255] am "
      "am_bw#0\n"
      "#                 lane[1]:  1:posix/memory.0 md[1]          -> md[1]/posix/sysdev[255]\n"
      "#                 lane[2]:  2:cma/memory.0 md[2]            -> md[2]/cma/sysdev[255] "
      "rma_bw#0\n"
      "#                 am_send: 0..<egr/short>..93..<egr/bcopy>..8256..<rndv>..(inf)\n");
  EXPECT_EQ(sm.transports, (std::vector<std::string>{"sysv", "posix", "cma"}));
  EXPECT_FALSE(sm.native_rma);  // rma_bw (rendezvous) is not an rma lane
  const internal::LaneInfo rc = internal::ParseEndpointInfo(
      "#  lane[0]:  3:rc_mlx5/mlx5_0:1.0 md[2]  -> md[2]/ib/sysdev[255] rma#0 rma_bw#0 amo#0 am "
      "am_bw#0\n#  lane[1]:  1:posix/memory.0 md[1] -> md[1]/posix/sysdev[255]\n");
  EXPECT_EQ(rc.transports, (std::vector<std::string>{"rc_mlx5", "posix"}));
  EXPECT_TRUE(rc.native_rma);
}

TEST(UcxUtilTest, ParsesContextResources) {
  EXPECT_EQ(
      internal::ParseContextTransports("#      resource 0  :  md 0  dev 0  flags -- self/memory0\n"
                                       "#      resource 1  :  md 1  dev 1  flags -- tcp/eth0\n"
                                       "#      resource 2  :  md 1  dev 2  flags -- tcp/lo\n"
                                       "#      resource 3  :  md 2  dev 3  flags -- sysv/memory\n"),
      (std::vector<std::string>{"self", "tcp", "sysv"}));
}

TEST(UcxUtilTest, PeerAddressRoundTripsAndRejectsGarbage) {
  internal::PeerAddress a;
  a.identity = internal::LocalIdentity();
  a.ucx_address = std::string("\0\1\2ucx", 6);
  ASSERT_OK_AND_ASSIGN(internal::PeerAddress b,
                       internal::DecodePeerAddress(internal::EncodePeerAddress(a)));
  EXPECT_EQ(b.ucx_address, a.ucx_address);
  EXPECT_EQ(b.identity.pid, a.identity.pid);
  EXPECT_TRUE(b.identity.SameHostAs(internal::LocalIdentity()));
  std::string truncated = internal::EncodePeerAddress(a);
  truncated.pop_back();
  EXPECT_THAT(internal::DecodePeerAddress(truncated),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("worker address")));
}

TEST(UcxUtilTest, ProcessAliveSeesDeath) {
  const internal::ProcessIdentity& me = internal::LocalIdentity();
  EXPECT_TRUE(internal::ProcessAlive(me.pid, me.start_time));
  EXPECT_FALSE(internal::ProcessAlive(me.pid, me.start_time + 1));  // a reused pid
  ChildOptions options;
  options.argv = {"/bin/sleep", "600"};
  ASSERT_OK_AND_ASSIGN(std::unique_ptr<ChildProcess> child, ChildProcess::Start(options));
  const uint64_t started = internal::ProcessStartTime(child->pid());
  EXPECT_TRUE(internal::ProcessAlive(child->pid(), started));
  child->Signal(SIGKILL);
  absl::SleepFor(absl::Milliseconds(100));  // a zombie until reaped: counts as dead
  EXPECT_FALSE(internal::ProcessAlive(child->pid(), started));
  ASSERT_OK_AND_ASSIGN(const int exit_code, child->Wait(absl::Seconds(10)));
  EXPECT_EQ(exit_code, 128 + SIGKILL);
}

}  // namespace
}  // namespace tandem::kvtransfer
