// End-to-end against the suite's cluster (worker_e2e_fixture.h): the real
// tandem-prefill and tandem-decode binaries, this test acting as the router.
//
// Scenarios:
//  - Disaggregated over UCX shared memory (ucx_tls sm) and over TCP
//    (ucx_tls tcp on lo): 20 prompts (some sharing prefixes, so the prefill
//    worker's prefix cache hits; some longer than a chunk) from 4 concurrent
//    clients, greedy and seeded temperature 0.8 (some with stop strings):
//    token ids and text equal common/engine/generation.h Generate() run in this
//    process on the same model; the KV bytes of each request equal the
//    KvLayout formula (reservation, prefill response, decode-side counter).
//  - Colocated (Decode.Generate) for the same requests: same equality.
//  - After each run every pool is back to zero used blocks (Control.Watch
//    load and /metrics; prefix-cache blocks are reported separately).
//  - Cancel mid-stream (client stream cancelled, and Decode.Cancel): the
//    stream ends CANCELLED and the decode worker's blocks are free at once.
//  - Bad input (token id out of range, prompt + max_tokens over the context,
//    max_tokens <= 0, bad sampling parameters) is INVALID_ARGUMENT from
//    Reserve, Generate and Prefill; a reservation with another KV layout is
//    FAILED_PRECONDITION naming both; the workers keep serving.
//  - Control.Watch: snapshot first (id, role, model, layout, load), then
//    heartbeats; grpc.health.v1 reports SERVING.

#include <grpcpp/grpcpp.h>

#include <cstdio>
#include <functional>
#include <string>
#include <vector>

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

TEST_F(WorkerE2eTest, DisaggregatedOverUcxSharedMemoryMatchesReference) {
  CheckDisaggregated("sm");
}

TEST_F(WorkerE2eTest, DisaggregatedOverUcxTcpMatchesReference) { CheckDisaggregated("tcp"); }

TEST_F(WorkerE2eTest, ColocatedMatchesReference) {
  auto decode = v1::Decode::NewStub(Dial(*colocated_));
  const std::vector<Request> reqs = MakeRequests("coloc");
  std::vector<Outcome> outs(reqs.size());
  const absl::Time t0 = absl::Now();
  FromClients(reqs.size(), [&](int i) { outs[i] = RunColocated(*decode, reqs[i].submit); });
  const absl::Duration took = absl::Now() - t0;
  for (size_t i = 0; i < reqs.size(); ++i) {
    SCOPED_TRACE(reqs[i].submit.request_id());
    ASSERT_TRUE(outs[i].status.ok()) << outs[i].status.error_message();
    EXPECT_EQ(outs[i].tokens, reqs[i].want_tokens);
    EXPECT_EQ(outs[i].text, reqs[i].want_text);
  }
  std::printf("[ measure  ] colocated: %zu requests from %d clients in %.3f s\n", reqs.size(),
              kClients, absl::ToDoubleSeconds(took));
  EXPECT_TRUE(UsedBlocksReachZero(*colocated_));
}

TEST_F(WorkerE2eTest, CancelMidStreamFreesKvOnBothSides) {
  Pair& pair = pairs_.at("sm");
  auto decode = v1::Decode::NewStub(Dial(*pair.decode));
  auto prefill = v1::Prefill::NewStub(Dial(*pair.prefill));
  for (const bool via_cancel_rpc : {false, true}) {
    SCOPED_TRACE(via_cancel_rpc ? "Decode.Cancel" : "client cancels the stream");
    const v1::DecodeSubmit submit = LongRequest(via_cancel_rpc ? "cancel-rpc" : "cancel-stream");
    grpc::ClientContext ctx;
    auto reader = StartStreaming(*decode, *prefill, submit, 3, &ctx);
    ASSERT_NE(reader, nullptr);
    v1::DecodeEvent ev;
    const absl::Time t0 = absl::Now();
    if (via_cancel_rpc) {
      grpc::ClientContext cctx;
      v1::CancelRequest creq;
      creq.set_request_id(submit.request_id());
      v1::CancelResponse cresp;
      ASSERT_TRUE(decode->Cancel(&cctx, creq, &cresp).ok());
      EXPECT_TRUE(cresp.found());
      bool final_seen = false;
      while (reader->Read(&ev)) {
        final_seen |= ev.tokens().finish_reason() != v1::FINISH_REASON_UNSPECIFIED;
      }
      EXPECT_FALSE(final_seen) << "the request ran to completion before the cancel";
      const grpc::Status st = reader->Finish();
      EXPECT_EQ(st.error_code(), grpc::StatusCode::CANCELLED) << st.error_message();
      EXPECT_THAT(st.error_message(),
                  HasSubstr(absl::StrCat("request ", submit.request_id(), " cancelled")));
    } else {
      ctx.TryCancel();
      while (reader->Read(&ev)) {
      }
      EXPECT_EQ(reader->Finish().error_code(), grpc::StatusCode::CANCELLED);
    }
    EXPECT_TRUE(UsedBlocksReachZero(*pair.decode, absl::Seconds(2)));
    EXPECT_TRUE(UsedBlocksReachZero(*pair.prefill, absl::Seconds(2)));
    std::printf("[ measure  ] cancel (%s) to zero used blocks: %.3f s\n",
                via_cancel_rpc ? "rpc" : "stream", absl::ToDoubleSeconds(absl::Now() - t0));
  }
}

TEST_F(WorkerE2eTest, BadInputIsInvalidArgumentAndWorkersKeepServing) {
  Pair& pair = pairs_.at("sm");
  auto decode = v1::Decode::NewStub(Dial(*pair.decode));
  auto prefill = v1::Prefill::NewStub(Dial(*pair.prefill));
  auto coloc = v1::Decode::NewStub(Dial(*colocated_));
  const int vocab = Reference::Get().model().config().vocab_size;
  const int context = Reference::Get().model().config().context_length;
  struct Bad {
    std::string name;
    std::function<void(v1::DecodeSubmit*)> mutate;
    std::string message;
  };
  const std::vector<Bad> bad = {
      {"token id out of range", [&](v1::DecodeSubmit* s) { s->set_prompt_ids(1, vocab + 5); },
       "outside the vocabulary"},
      {"negative token id", [](v1::DecodeSubmit* s) { s->set_prompt_ids(0, -1); },
       "outside the vocabulary"},
      {"over the context", [&](v1::DecodeSubmit* s) { s->set_max_tokens(context); },
       "exceeds the model context"},
      {"max_tokens 0", [](v1::DecodeSubmit* s) { s->set_max_tokens(0); }, "max_tokens"},
      {"max_tokens negative", [](v1::DecodeSubmit* s) { s->set_max_tokens(-3); }, "max_tokens"},
      {"negative temperature",
       [](v1::DecodeSubmit* s) { s->mutable_sampling()->set_temperature(-1); }, "temperature"},
      {"top_p above 1", [](v1::DecodeSubmit* s) { s->mutable_sampling()->set_top_p(1.5f); },
       "top_p"},
      {"empty prompt", [](v1::DecodeSubmit* s) { s->clear_prompt_ids(); }, "prompt is empty"},
  };
  const v1::DecodeSubmit good = LongRequest("bad-input-good", 8);
  for (const Bad& b : bad) {
    SCOPED_TRACE(b.name);
    v1::DecodeSubmit s = good;
    s.set_request_id("bad-" + b.name);
    b.mutate(&s);
    Outcome d = RunDisaggregated(*decode, *prefill, s);
    EXPECT_EQ(d.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(d.status.error_message(), HasSubstr(b.message));
    EXPECT_FALSE(d.got_reservation);
    Outcome c = RunColocated(*coloc, s);
    EXPECT_EQ(c.status.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(c.status.error_message(), HasSubstr(b.message));
    // Prefill checks the request itself too (a reservation from a good one).
    grpc::ClientContext rctx;
    v1::ReserveRequest rreq;
    *rreq.mutable_request() = good;
    rreq.mutable_request()->set_request_id("bad-res-" + b.name);
    auto reader = decode->Reserve(&rctx, rreq);
    v1::DecodeEvent ev;
    ASSERT_TRUE(reader->Read(&ev) && ev.has_reservation());
    grpc::ClientContext pctx;
    v1::PrefillRequest preq;
    *preq.mutable_request() = s;
    preq.mutable_request()->set_request_id(ev.reservation().request_id());
    *preq.mutable_reservation() = ev.reservation();
    v1::PrefillResponse presp;
    grpc::Status ps = prefill->Prefill(&pctx, preq, &presp);
    EXPECT_EQ(ps.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
    EXPECT_THAT(ps.error_message(), HasSubstr(b.message));
    rctx.TryCancel();
    while (reader->Read(&ev)) {
    }
    reader->Finish().ok();
  }
  // A reservation whose layout differs (block size) is refused naming both layouts.
  {
    grpc::ClientContext rctx;
    rctx.set_deadline(In(absl::Seconds(10)));  // without the notice: DEADLINE_EXCEEDED, no hang
    v1::ReserveRequest rreq;
    *rreq.mutable_request() = good;
    rreq.mutable_request()->set_request_id("layout-mismatch");
    auto reader = decode->Reserve(&rctx, rreq);
    v1::DecodeEvent ev;
    ASSERT_TRUE(reader->Read(&ev) && ev.has_reservation());
    v1::PrefillRequest preq;
    *preq.mutable_request() = rreq.request();
    *preq.mutable_reservation() = ev.reservation();
    preq.mutable_reservation()->mutable_layout()->set_block_size(32);
    grpc::ClientContext pctx;
    v1::PrefillResponse presp;
    grpc::Status ps = prefill->Prefill(&pctx, preq, &presp);
    EXPECT_EQ(ps.error_code(), grpc::StatusCode::FAILED_PRECONDITION);
    EXPECT_THAT(ps.error_message(), HasSubstr("block=16"));
    EXPECT_THAT(ps.error_message(), HasSubstr("block=32"));
    // The refusing prefill worker tells the decode worker over gRPC
    // (Decode.Commit with abort): the reservation ends at once, not at its
    // deadline, and its blocks are not fenced.
    while (reader->Read(&ev)) {
    }
    const grpc::Status rs = reader->Finish();
    EXPECT_EQ(rs.error_code(), grpc::StatusCode::UNAVAILABLE) << rs.error_message();
    EXPECT_THAT(rs.error_message(), HasSubstr("prefill worker gave it up"));
  }
  // Still serving, and nothing leaked.
  Outcome ok = RunDisaggregated(*decode, *prefill, good);
  EXPECT_TRUE(ok.status.ok()) << ok.status.error_message();
  EXPECT_EQ(ok.tokens.size(), 8u);
  Outcome cok = RunColocated(*coloc, good);
  EXPECT_TRUE(cok.status.ok()) << cok.status.error_message();
  EXPECT_EQ(cok.tokens, ok.tokens);
  EXPECT_TRUE(UsedBlocksReachZero(*pair.decode));
  EXPECT_TRUE(UsedBlocksReachZero(*pair.prefill));
  EXPECT_TRUE(UsedBlocksReachZero(*colocated_));
}

TEST_F(WorkerE2eTest, WatchStartsWithSnapshotThenHeartbeatsAndHealthServes) {
  Pair& pair = pairs_.at("sm");
  for (WorkerProcess* w : {pair.decode.get(), pair.prefill.get(), colocated_.get()}) {
    SCOPED_TRACE(w->name());
    auto stub = v1::Control::NewStub(Dial(*w));
    grpc::ClientContext ctx;
    ctx.set_deadline(In(absl::Seconds(5)));
    auto reader = stub->Watch(&ctx, v1::WatchRequest());
    v1::WorkerEvent ev;
    ASSERT_TRUE(reader->Read(&ev));
    ASSERT_TRUE(ev.has_snapshot());
    const v1::WorkerSnapshot& s = ev.snapshot();
    EXPECT_THAT(s.worker_id(), HasSubstr(w->address()));
    EXPECT_EQ(s.model().vocab_size(), Reference::Get().model().config().vocab_size);
    EXPECT_EQ(s.layout().block_size(), kBlockSize);
    EXPECT_EQ(s.layout().dtype(), "F32");
    EXPECT_EQ(s.load().total_kv_blocks(), kKvBlocks);
    EXPECT_NE(s.role(), v1::WORKER_ROLE_UNSPECIFIED);
    bool heartbeat = false;
    while (!heartbeat && reader->Read(&ev)) heartbeat = ev.has_heartbeat_unix_seconds();
    EXPECT_TRUE(heartbeat);
    ctx.TryCancel();
    reader->Finish().ok();

    EXPECT_EQ(HealthStatus(*w), 1) << "grpc.health.v1 SERVING";
  }
}

}  // namespace
}  // namespace tandem::integration
