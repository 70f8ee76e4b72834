// End-to-end with workers started per test (worker_e2e_fixture.h) to be
// killed, squeezed or drained; the suite's cluster serves alongside.
//
// Scenarios:
//  - A prefill worker SIGKILLed before it commits (stopped, sent the
//    Prefill, killed): the decode worker frees the reservation at its
//    deadline and the client's stream ends UNAVAILABLE.
//  - A decode worker SIGKILLed mid-stream: the client's stream ends
//    UNAVAILABLE within 5 s; the prefill worker stays at zero used blocks.
//  - Preemption: a colocated worker with a pool too small for its 4
//    concurrent requests preempts (counted in /metrics) and still matches
//    the reference.
//  - SIGTERM: an in-flight request finishes, the process exits 0.

#include <grpcpp/grpcpp.h>
#include <signal.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/integration/worker_e2e_fixture.h"

namespace tandem::integration {
namespace {

using ::testing::HasSubstr;

// A prefill worker that dies before committing: the decode worker frees the
// reservation at its deadline and the client's stream ends UNAVAILABLE.
TEST_F(WorkerE2eTest, PrefillKilledBeforeCommitFreesReservationAtDeadline) {
  auto p = WorkerProcess::Start(Bin("tandem-prefill"),
                                Flags({"--role=prefill", "--transport=ucx", "--ucx_tls=sm"}));
  ASSERT_TRUE(p.ok()) << p.status();
  auto d = WorkerProcess::Start(
      Bin("tandem-decode"),
      Flags({"--role=decode", "--transport=ucx", "--ucx_tls=sm", "--reservation_deadline=1s"}));
  ASSERT_TRUE(d.ok()) << d.status();
  auto decode = v1::Decode::NewStub(Dial(**d));
  auto prefill = v1::Prefill::NewStub(Dial(**p));
  const v1::DecodeSubmit submit = LongRequest("orphan", 32);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(30)));
  v1::ReserveRequest req;
  *req.mutable_request() = submit;
  auto reader = decode->Reserve(&ctx, req);
  v1::DecodeEvent ev;
  ASSERT_TRUE(reader->Read(&ev) && ev.has_reservation());
  const absl::Time reserved = absl::Now();
  ASSERT_TRUE(WatchLoadUntil(
      **d, [](int used, const v1::WorkerLoad&) { return used > 0; }, "holding the reservation",
      absl::Seconds(5)));

  // Freeze the prefill worker, hand it the request, kill it: it never commits.
  (*p)->Signal(SIGSTOP);
  grpc::ClientContext pctx;
  pctx.set_deadline(In(absl::Seconds(20)));
  v1::PrefillRequest preq;
  *preq.mutable_request() = submit;
  *preq.mutable_reservation() = ev.reservation();
  v1::PrefillResponse presp;
  grpc::Status ps;
  std::thread caller([&] { ps = prefill->Prefill(&pctx, preq, &presp); });
  absl::SleepFor(absl::Milliseconds(200));
  (*p)->Signal(SIGKILL);
  caller.join();
  EXPECT_EQ(ps.error_code(), grpc::StatusCode::UNAVAILABLE) << ps.error_message();

  while (reader->Read(&ev)) {
  }
  const grpc::Status st = reader->Finish();
  const absl::Duration waited = absl::Now() - reserved;
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_THAT(st.error_message(), HasSubstr("deadline"));
  EXPECT_GE(waited, absl::Milliseconds(900));
  EXPECT_LT(waited, absl::Seconds(4));
  // Shared memory is put mode: the blocks stay fenced for the 1 s grace
  // after the deadline (a dead writer never says it stopped).
  EXPECT_TRUE(UsedBlocksReachZero(**d, absl::Seconds(4)));
  EXPECT_EQ(Metrics(**d)["tandem_decode_reservations_expired_total"], 1);
  EXPECT_TRUE(ExitsCleanlyOnSigterm(**d));
  std::printf("[ measure  ] orphaned reservation freed after %.3f s (deadline 1 s)\n",
              absl::ToDoubleSeconds(waited));
}

// A decode worker killed mid-stream: the client sees UNAVAILABLE within 5 s.
TEST_F(WorkerE2eTest, DecodeKilledMidStreamEndsStreamUnavailable) {
  Pair& pair = pairs_.at("sm");
  auto d = WorkerProcess::Start(Bin("tandem-decode"),
                                Flags({"--role=decode", "--transport=ucx", "--ucx_tls=sm"}));
  ASSERT_TRUE(d.ok()) << d.status();
  auto decode = v1::Decode::NewStub(Dial(**d));
  auto prefill = v1::Prefill::NewStub(Dial(*pair.prefill));
  const v1::DecodeSubmit submit = LongRequest("doomed");
  grpc::ClientContext ctx;
  auto reader = StartStreaming(*decode, *prefill, submit, 2, &ctx);
  ASSERT_NE(reader, nullptr);
  v1::DecodeEvent ev;
  (*d)->Signal(SIGKILL);
  const absl::Time killed = absl::Now();
  while (reader->Read(&ev)) {
  }
  const grpc::Status st = reader->Finish();
  const absl::Duration took = absl::Now() - killed;
  EXPECT_EQ(st.error_code(), grpc::StatusCode::UNAVAILABLE) << st.error_message();
  EXPECT_LT(took, absl::Seconds(5));
  std::printf("[ measure  ] decode worker killed: stream ended after %.3f s\n",
              absl::ToDoubleSeconds(took));
  EXPECT_TRUE(UsedBlocksReachZero(*pair.prefill));
}

// A colocated worker whose pool cannot hold all its requests at once
// preempts (recomputing later) and still answers exactly the reference.
TEST_F(WorkerE2eTest, PreemptionUnderPoolPressureMatchesReference) {
  // Requests of 5 + 150 tokens need 10 blocks each: any two running at once
  // overflow the 12-block pool (4 clients run them concurrently).
  std::vector<std::string> f = Flags({"--role=colocated"});
  for (std::string& s : f) {
    if (absl::StartsWith(s, "--kv_blocks=")) s = "--kv_blocks=12";
  }
  auto c = WorkerProcess::Start(Bin("tandem-decode"), f);
  ASSERT_TRUE(c.ok()) << c.status();
  auto decode = v1::Decode::NewStub(Dial(**c));
  std::vector<Request> reqs;
  for (int i = 0; i < 8; ++i) {
    v1::DecodeSubmit s = LongRequest(absl::StrCat("squeeze-", i), 150);
    if (i % 2 == 1) {
      s.mutable_sampling()->set_temperature(0.8f);
      s.mutable_sampling()->set_seed(7 + i);
    }
    reqs.push_back(Reference::Get().Make(std::move(s)));
  }
  std::vector<Outcome> outs(reqs.size());
  FromClients(reqs.size(), [&](int i) { outs[i] = RunColocated(*decode, reqs[i].submit); });
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE(reqs[i].submit.request_id());
    ASSERT_TRUE(outs[i].status.ok()) << outs[i].status.error_message() << (*c)->Tail();
    EXPECT_EQ(outs[i].tokens, reqs[i].want_tokens);
  }
  const double preemptions = Metrics(**c)["tandem_decode_preemptions_total"];
  EXPECT_GT(preemptions, 0);
  std::printf("[ measure  ] 8 requests on a 12-block pool: %.0f preemptions\n", preemptions);
  EXPECT_TRUE(UsedBlocksReachZero(**c));
  EXPECT_TRUE(ExitsCleanlyOnSigterm(**c));
}

// SIGTERM: the in-flight request finishes, the process exits 0.
TEST_F(WorkerE2eTest, SigtermDrainsInFlightRequestsAndExitsZero) {
  auto c = WorkerProcess::Start(Bin("tandem-decode"), Flags({"--role=colocated"}));
  ASSERT_TRUE(c.ok()) << c.status();
  auto decode = v1::Decode::NewStub(Dial(**c));
  // Long enough (~0.5 s here) that the checks below run while it drains.
  const v1::DecodeSubmit submit = LongRequest("drained", 1500);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(30)));
  auto reader = decode->Generate(&ctx, submit);
  v1::GenerateResponse r;
  Outcome out;
  ASSERT_TRUE(reader->Read(&r));
  Absorb(r, &out);
  (*c)->Signal(SIGTERM);
  const absl::Time sigterm = absl::Now();
  ASSERT_TRUE(reader->Read(&r));
  Absorb(r, &out);
  // Draining: health says NOT_SERVING (once the signal is handled), and new
  // requests are refused.
  int health = HealthStatus(**c);
  for (const absl::Time give_up = absl::Now() + absl::Seconds(10);
       health == 1 && absl::Now() < give_up; health = HealthStatus(**c)) {
    absl::SleepFor(absl::Milliseconds(5));
  }
  EXPECT_EQ(health, 2) << "grpc.health.v1 NOT_SERVING while draining";
  Outcome refused = RunColocated(*decode, LongRequest("too-late", 4));
  EXPECT_EQ(refused.status.error_code(), grpc::StatusCode::UNAVAILABLE)
      << refused.status.error_message();
  EXPECT_THAT(refused.status.error_message(), HasSubstr("decode worker is draining"));
  while (reader->Read(&r)) Absorb(r, &out);
  const grpc::Status st = reader->Finish();
  EXPECT_TRUE(st.ok()) << st.error_message();
  EXPECT_EQ(out.tokens.size(), 1500u);
  EXPECT_EQ(out.finish, v1::FINISH_REASON_LENGTH);
  absl::StatusOr<int> code = (*c)->Wait(absl::Seconds(10));
  ASSERT_TRUE(code.ok()) << code.status();
  EXPECT_EQ(*code, 0) << (*c)->Tail();
  std::printf("[ measure  ] SIGTERM to exit with one request in flight: %.3f s\n",
              absl::ToDoubleSeconds(absl::Now() - sigterm));
}

}  // namespace
}  // namespace tandem::integration
