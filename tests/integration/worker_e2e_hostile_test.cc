// End-to-end with a hostile client (issue 8): it reserves on a real decode
// worker, then calls Prefill on a real prefill worker with that reservation
// forged. Every forgery must come back as an error status naming the field,
// with the prefill worker alive (it serves a genuine request right after)
// and both pools back to zero used blocks. Workers are started per test over
// UCX shared memory, so a crash in one case does not hide the next.
//
// Not covered yet: a reservation the decode worker never issued (a genuine
// one relabelled to another request id) is still written, into the genuine
// request's blocks, before the decode worker's Commit refuses it NOT_FOUND.
//
// Known gap: a structurally valid rkey that names other memory (another
// process's registration) cannot be told from a genuine one here. Internal
// mutual TLS (worker_e2e_mtls_test) keeps callers without a cluster
// certificate from sending a Prefill at all; these workers run without it to
// reach the validation behind it. A cluster member holding a valid
// certificate remains trusted (docs/security.md).

#include <grpcpp/grpcpp.h>

#include <cstdint>
#include <functional>
#include <limits>
#include <ostream>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/integration/worker_e2e_fixture.h"

namespace tandem::integration {
namespace {

using ::testing::HasSubstr;

struct Forgery {
  std::string name;
  std::function<void(v1::PrefillRequest&)> alter;
  grpc::StatusCode code;
  std::string names;  // what the error message must name

  friend void PrintTo(const Forgery& f, std::ostream* os) { *os << f.name; }
};

std::string RandomBytes(size_t n, uint32_t seed) {
  std::mt19937 rng(seed);
  std::string s(n, '\0');
  for (char& c : s) c = static_cast<char>(rng() & 0xff);
  return s;
}

// A prompt of three blocks, so block ids can be duplicated.
v1::DecodeSubmit ThreeBlockRequest(const std::string& id) {
  v1::DecodeSubmit s = LongRequest(id, 4);
  const std::vector<int32_t> once(s.prompt_ids().begin(), s.prompt_ids().end());
  while (s.prompt_ids_size() < 2 * kBlockSize + 1) {
    for (int32_t t : once) s.add_prompt_ids(t);
  }
  return s;
}

// A forgery of the reservation alone.
std::function<void(v1::PrefillRequest&)> Reservation(std::function<void(v1::KvReservation&)> fn) {
  return [fn = std::move(fn)](v1::PrefillRequest& r) { fn(*r.mutable_reservation()); };
}

std::vector<Forgery> Forgeries() {
  std::vector<Forgery> f;
  for (uint32_t seed : {1u, 2u, 3u}) {
    f.push_back({absl::StrCat("PutWithRandom12ByteRkey", seed),
                 Reservation([seed](v1::KvReservation& r) {
                   r.set_transfer_mode("put");
                   r.set_rkey(RandomBytes(12, seed));
                 }),
                 grpc::StatusCode::INVALID_ARGUMENT, "rkey"});
  }
  f.push_back({"EmptyRkey", Reservation([](v1::KvReservation& r) { r.clear_rkey(); }),
               grpc::StatusCode::INVALID_ARGUMENT, "rkey"});
  f.push_back({"TruncatedRkey", Reservation([](v1::KvReservation& r) {
                 r.set_rkey(r.rkey().substr(0, r.rkey().size() / 2));
               }),
               grpc::StatusCode::INVALID_ARGUMENT, "rkey"});
  f.push_back({"RkeyWithTrailingBytes",
               Reservation([](v1::KvReservation& r) { r.set_rkey(r.rkey() + RandomBytes(2, 7)); }),
               grpc::StatusCode::INVALID_ARGUMENT, "rkey"});
  f.push_back({"UnknownTransferMode",
               Reservation([](v1::KvReservation& r) { r.set_transfer_mode("dma"); }),
               grpc::StatusCode::INVALID_ARGUMENT, "transfer_mode"});
  f.push_back({"NoBlockIds", Reservation([](v1::KvReservation& r) { r.clear_block_ids(); }),
               grpc::StatusCode::INVALID_ARGUMENT, "block_ids"});
  f.push_back({"BlockIdOutOfPool",
               Reservation([](v1::KvReservation& r) { r.set_block_ids(1, kKvBlocks); }),
               grpc::StatusCode::INVALID_ARGUMENT, "block_ids"});
  f.push_back({"NegativeBlockId", Reservation([](v1::KvReservation& r) { r.set_block_ids(0, -1); }),
               grpc::StatusCode::INVALID_ARGUMENT, "block_ids"});
  f.push_back({"DuplicateBlockId",
               Reservation([](v1::KvReservation& r) { r.set_block_ids(2, r.block_ids(0)); }),
               grpc::StatusCode::INVALID_ARGUMENT, "block_ids"});
  f.push_back({"PoolBytesNotWholeBlocks",
               Reservation([](v1::KvReservation& r) { r.set_pool_bytes(r.pool_bytes() + 1); }),
               grpc::StatusCode::INVALID_ARGUMENT, "pool_bytes"});
  f.push_back({"PoolPastAddressSpace", Reservation([](v1::KvReservation& r) {
                 r.set_pool_base(std::numeric_limits<uint64_t>::max() - r.pool_bytes() / 2);
               }),
               grpc::StatusCode::INVALID_ARGUMENT, "pool_base"});
  f.push_back({"NullPoolBase", Reservation([](v1::KvReservation& r) { r.set_pool_base(0); }),
               grpc::StatusCode::INVALID_ARGUMENT, "pool_base"});
  f.push_back({"ExpectedBytesNotTheLayouts", Reservation([](v1::KvReservation& r) {
                 r.set_expected_bytes(r.expected_bytes() * 2);
               }),
               grpc::StatusCode::INVALID_ARGUMENT, "expected_bytes"});
  // Issue 8: the Commit channel dials plain host:port only (no unix: or
  // dns:/// URI a forger could point it at), refused before any KV moves.
  f.push_back({"DecodeWorkerIsAUri", Reservation([](v1::KvReservation& r) {
                 r.set_decode_worker("unix:/tmp/tandem-not-a-decode-worker.sock");
               }),
               grpc::StatusCode::INVALID_ARGUMENT, "decode_worker"});
  f.push_back({"DecodeWorkerWithoutPort",
               Reservation([](v1::KvReservation& r) { r.set_decode_worker("127.0.0.1"); }),
               grpc::StatusCode::INVALID_ARGUMENT, "decode_worker"});
  f.push_back({"GarbageWorkerAddress",
               Reservation([](v1::KvReservation& r) { r.set_worker_address(RandomBytes(40, 9)); }),
               grpc::StatusCode::INVALID_ARGUMENT, "worker_address"});
  f.push_back({"LayoutOfAnotherModel", Reservation([](v1::KvReservation& r) {
                 r.mutable_layout()->set_num_layers(r.layout().num_layers() + 1);
               }),
               grpc::StatusCode::FAILED_PRECONDITION, "layout"});
  return f;
}

class WorkerE2eHostileTest : public ::testing::TestWithParam<Forgery> {
 protected:
  void SetUp() override {
    auto p = WorkerProcess::Start(Bin("tandem-prefill"),
                                  Flags({"--role=prefill", "--transport=ucx", "--ucx_tls=sm"}));
    ASSERT_TRUE(p.ok()) << p.status();
    prefill_ = *std::move(p);
    auto d = WorkerProcess::Start(Bin("tandem-decode"),
                                  Flags({"--role=decode", "--transport=ucx", "--ucx_tls=sm"}));
    ASSERT_TRUE(d.ok()) << d.status();
    decode_ = *std::move(d);
  }

  std::unique_ptr<WorkerProcess> prefill_;
  std::unique_ptr<WorkerProcess> decode_;
};

TEST_P(WorkerE2eHostileTest, ForgedReservationIsAnErrorNotACrash) {
  const Forgery& forgery = GetParam();
  auto decode = v1::Decode::NewStub(Dial(*decode_));
  auto prefill = v1::Prefill::NewStub(Dial(*prefill_));

  const Outcome forged =
      RunDisaggregated(*decode, *prefill, ThreeBlockRequest("forged"), forgery.alter);
  ASSERT_TRUE(forged.got_reservation) << forged.status.error_message();
  EXPECT_FALSE(forged.prefilled);
  EXPECT_EQ(forged.status.error_code(), forgery.code) << forged.status.error_message();
  EXPECT_THAT(forged.status.error_message(), HasSubstr(forgery.names));

  // Alive, and serving: a genuine request right after goes through.
  EXPECT_EQ(HealthStatus(*prefill_), 1);
  const Outcome genuine = RunDisaggregated(*decode, *prefill, ThreeBlockRequest("genuine"));
  EXPECT_TRUE(genuine.status.ok()) << genuine.status.error_message();
  EXPECT_TRUE(genuine.prefilled);

  EXPECT_TRUE(UsedBlocksReachZero(*decode_));
  EXPECT_TRUE(UsedBlocksReachZero(*prefill_));
}

INSTANTIATE_TEST_SUITE_P(Forgeries, WorkerE2eHostileTest, ::testing::ValuesIn(Forgeries()),
                         [](const ::testing::TestParamInfo<Forgery>& info) {
                           return info.param.name;
                         });

}  // namespace
}  // namespace tandem::integration
