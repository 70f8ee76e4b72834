// The prefill and decode engines of the two worker libraries in one process,
// joined by LoopbackTransport (wrapped in FaultInjectingTransport) and a
// committer that calls the decode engine directly: the KV push / commit /
// import logic without gRPC or UCX. Both engines run on one SimulatedClock:
// deadlines, fences and grace periods pass only when a test advances it, so
// each is checked to the nanosecond (not yet at T - 1 ns, done at T) and
// none fires early on a slow machine. What the tests wait for in real time
// (an engine thread reaching a state, delayed writes) they wait for as a
// condition with a generous bound.
//
// Scenarios:
//  - Chunks that end inside blocks, several requests per prefill step,
//    prefix-cache hits: tokens equal Generate(); bytes equal the KvLayout
//    formula; both pools return to zero used blocks.
//  - Preemption of imported sequences on a small decode pool: they are
//    recomputed locally (prompt + generated) and still match Generate().
//  - Writes that report success but never land (drop): the decode engine
//    fails the commit at the reservation deadline, not before
//    (DEADLINE_EXCEEDED to the prefill side, UNAVAILABLE to the client);
//    nothing leaks.
//  - Writes that fail: the prefill call fails UNAVAILABLE without
//    committing; its abort notice ends the reservation with no time passing;
//    nothing leaks.
//  - A prefill worker whose Prefill call is cancelled mid-push frees its
//    blocks once the writes are done.
//  - Fences over cancelled reservations; Reserves queued for blocks; a
//    refused prefill; the prefill engine's shutdown bound.
//  - The prefill engine's block listener (what the worker publishes for the
//    router's prefix index) reports the names of the prompt's full blocks.

#include <algorithm>
#include <atomic>
#include <functional>
#include <iterator>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/clock.h"
#include "common/base/logging.h"
#include "common/engine/engine.h"
#include "common/engine/generation.h"
#include "common/engine/model.h"
#include "decode_worker/decode_engine.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "kvtransfer/fault_injecting_transport.h"
#include "kvtransfer/loopback_transport.h"
#include "prefill_worker/prefill_engine.h"
#include "tests/testing/eventually.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"

namespace tandem {
namespace {

using ::tandem::testing::Eventually;
using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

constexpr int kBlockSize = 16;

const engine::Model& TheModel() {
  static const engine::Model* m = [] {
    auto r =
        engine::Model::Load(::tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf"));
    CHECK(r.ok()) << r.status();
    return r->release();
  }();
  return *m;
}

std::unique_ptr<engine::Engine> MakeEngine(int blocks) {
  engine::EngineConfig c;
  c.num_threads = 1;
  c.num_kv_blocks = blocks;
  c.block_size = kBlockSize;
  auto e = engine::Engine::Create(TheModel(), c);
  CHECK(e.ok()) << e.status();
  return std::move(*e);
}

// A client stream: records what the decode engine sends.
class Sink : public decode_worker::RequestSink {
 public:
  void OnReservation(const decode_worker::Reservation& r) override {
    absl::MutexLock lock(&mu_);
    reservation_ = r;
    has_reservation_ = true;
  }
  void OnTokens(decode_worker::TokenEvent ev) override {
    absl::MutexLock lock(&mu_);
    for (const engine::SampleResult& s : ev.tokens) tokens_.push_back(s.token);
    text_ += ev.text;
    if (ev.final) done_ = true;
  }
  void OnError(const absl::Status& s) override {
    absl::MutexLock lock(&mu_);
    status_ = s;
    done_ = true;
  }
  ::testing::AssertionResult WaitReservation(decode_worker::Reservation* out) {
    absl::MutexLock lock(&mu_);
    auto ready = [this]() ABSL_EXCLUSIVE_LOCKS_REQUIRED(mu_) { return has_reservation_ || done_; };
    if (!mu_.AwaitWithTimeout(absl::Condition(&ready), absl::Seconds(10)) || !has_reservation_) {
      return ::testing::AssertionFailure() << "no reservation: " << status_;
    }
    *out = reservation_;
    return ::testing::AssertionSuccess();
  }
  ::testing::AssertionResult WaitDone() {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(20))) {
      return ::testing::AssertionFailure() << "stream not finished in 20 s";
    }
    return ::testing::AssertionSuccess();
  }
  std::vector<int32_t> tokens() {
    absl::MutexLock lock(&mu_);
    return tokens_;
  }
  bool has_reservation() {
    absl::MutexLock lock(&mu_);
    return has_reservation_;
  }
  bool done() {
    absl::MutexLock lock(&mu_);
    return done_;
  }
  std::string text() {
    absl::MutexLock lock(&mu_);
    return text_;
  }
  absl::Status status() {
    absl::MutexLock lock(&mu_);
    return status_;
  }

 private:
  absl::Mutex mu_;
  bool has_reservation_ ABSL_GUARDED_BY(mu_) = false;
  decode_worker::Reservation reservation_ ABSL_GUARDED_BY(mu_);
  std::vector<int32_t> tokens_ ABSL_GUARDED_BY(mu_);
  std::string text_ ABSL_GUARDED_BY(mu_);
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::Status status_ ABSL_GUARDED_BY(mu_);
};

class Call : public prefill_worker::PrefillCall {
 public:
  void Done(absl::StatusOr<prefill_worker::PrefillResult> r) override {
    absl::MutexLock lock(&mu_);
    result_ = std::move(r);
    done_ = true;
  }
  absl::StatusOr<prefill_worker::PrefillResult> Wait() {
    absl::MutexLock lock(&mu_);
    if (!mu_.AwaitWithTimeout(absl::Condition(&done_), absl::Seconds(20))) {
      return absl::DeadlineExceededError("prefill call not done in 20 s");
    }
    return result_;
  }

 private:
  absl::Mutex mu_;
  bool done_ ABSL_GUARDED_BY(mu_) = false;
  absl::StatusOr<prefill_worker::PrefillResult> result_ ABSL_GUARDED_BY(mu_) =
      absl::UnknownError("unset");
};

// Commits straight into the decode engine (the gRPC hop of the real worker),
// or holds them unanswered (a decode worker that never replies).
class DirectCommitter : public prefill_worker::Committer {
 public:
  void set_decode(decode_worker::DecodeEngine* d) { decode_ = d; }
  void set_hold(bool hold) {
    absl::MutexLock lock(&mu_);
    hold_ = hold;
  }
  void Commit(prefill_worker::CommitArgs args,
              absl::AnyInvocable<void(absl::Status) &&> done) override {
    {
      absl::MutexLock lock(&mu_);
      if (hold_) {
        ++commits_;
        held_.push_back(std::move(done));  // destroyed unrun
        return;
      }
    }
    decode_worker::CommitSpec c;
    c.request_id = args.request_id;
    c.first = args.first;
    c.num_tokens = args.num_tokens;
    c.bytes_written = args.bytes_written;
    c.abort = args.abort;
    ++(args.abort ? aborts_ : commits_);
    decode_->Commit(std::move(c), std::move(done));
  }

  int aborts() const { return aborts_.load(); }
  int commits() const { return commits_.load(); }

 private:
  decode_worker::DecodeEngine* decode_ = nullptr;
  absl::Mutex mu_;
  bool hold_ ABSL_GUARDED_BY(mu_) = false;
  std::vector<absl::AnyInvocable<void(absl::Status) &&>> held_ ABSL_GUARDED_BY(mu_);
  std::atomic<int> commits_{0};
  std::atomic<int> aborts_{0};
};

struct Options {
  int decode_blocks = 256;
  int prefill_blocks = 256;
  int chunk_size = 20;
  int token_budget = 48;
  absl::Duration reservation_deadline = absl::Seconds(10);
  absl::Duration fence_grace = absl::Seconds(1);
  int32_t prefill_max_queued = 1024;
  absl::Duration prefill_shutdown_bound = absl::Seconds(3);
  // Set before the prefill engine starts (PrefillEngine::set_block_listener).
  std::function<void(const engine::KvBlockEvents&)> prefill_block_listener;
};

class Cluster {
 public:
  explicit Cluster(const Options& o)
      : decode_metrics_(decode_registry_, "loopback"),
        prefill_metrics_(prefill_registry_, "loopback") {
    auto d_engine = MakeEngine(o.decode_blocks);
    auto region =
        decode_transport_.RegisterRegion(d_engine->kv_pool_base(), d_engine->kv_pool_bytes());
    CHECK(region.ok()) << region.status();
    decode_worker::DecodeEngineOptions dopts;
    dopts.scheduler.token_budget = o.token_budget;
    dopts.scheduler.chunk_size = o.chunk_size;
    dopts.reservation_deadline = o.reservation_deadline;
    dopts.fence_grace = o.fence_grace;
    decode_ = std::make_unique<decode_worker::DecodeEngine>(std::move(d_engine), &decode_transport_,
                                                            *region, dopts, &decode_metrics_,
                                                            clock_);
    auto p_engine = MakeEngine(o.prefill_blocks);
    prefill_transport_ = std::make_unique<kvtransfer::FaultInjectingTransport>(
        std::make_unique<kvtransfer::LoopbackTransport>());
    CHECK_OK(
        prefill_transport_->RegisterSource(p_engine->kv_pool_base(), p_engine->kv_pool_bytes()));
    committer_.set_decode(decode_.get());
    prefill_worker::PrefillEngineOptions popts;
    popts.scheduler.token_budget = o.token_budget;
    popts.scheduler.chunk_size = o.chunk_size;
    popts.max_queued = o.prefill_max_queued;
    popts.shutdown_bound = o.prefill_shutdown_bound;
    prefill_ = std::make_unique<prefill_worker::PrefillEngine>(
        std::move(p_engine), prefill_transport_.get(), &committer_, popts, &prefill_metrics_,
        clock_);
    if (o.prefill_block_listener) {
      prefill_->set_block_listener(o.prefill_block_listener);
    }
    decode_->Start(nullptr);
    prefill_->Start(nullptr);
  }
  ~Cluster() {
    prefill_->Stop();
    decode_->Stop();
    prefill_transport_->Shutdown();
    decode_transport_.Shutdown();
  }

  decode_worker::DecodeEngine& decode() { return *decode_; }
  prefill_worker::PrefillEngine& prefill() { return *prefill_; }
  kvtransfer::FaultInjectingTransport& faults() { return *prefill_transport_; }
  DirectCommitter& committer() { return committer_; }
  base::MetricsRegistry& decode_registry() { return decode_registry_; }
  base::SimulatedClock& clock() { return clock_; }
  // Whether an engine thread is (or soon is) asleep until exactly `t`: moving
  // the clock to `t` must then wake it, as no post will.
  bool SleepsUntil(absl::Time t) {
    return Eventually([&] {
      const std::vector<absl::Time> w = clock_.wakeups();
      return std::find(w.begin(), w.end(), t) != w.end();
    });
  }

  // Returns once the decode engine has run a whole loop turn (deadlines,
  // fences, load) that started after the call: two round trips through its
  // queue. Moving the clock and then syncing shows what the engine does at
  // that time.
  void SyncDecode() {
    for (int i = 0; i < 2; ++i) {
      absl::Notification done;
      decode_->Cancel("no-such-request", [&](bool found) {
        EXPECT_FALSE(found);
        done.Notify();
      });
      ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(20)));
    }
  }

  // The router's part: reservation -> prefill job.
  static prefill_worker::PrefillJob JobFor(const decode_worker::Reservation& r,
                                           const std::vector<int32_t>& prompt,
                                           const engine::SamplingParams& sampling) {
    prefill_worker::PrefillJob job;
    job.request_id = r.request_id;
    job.prompt = prompt;
    job.sampling = sampling;
    job.transfer_tag = r.transfer_tag;
    job.remote_blocks = r.block_ids;
    job.remote.layout = r.layout;
    job.remote.num_blocks = static_cast<int32_t>(
        r.region.bytes / (static_cast<uint64_t>(r.layout.num_layers) * 2 * r.layout.block_bytes()));
    job.region = r.region;
    job.decode_worker = "in-process";
    job.deadline = r.deadline;
    return job;
  }

  ::testing::AssertionResult PoolsBackToZero() {
    if (Eventually([this] {
          return decode_->load().used_blocks == 0 && prefill_->load().used_blocks == 0 &&
                 decode_->num_live_requests() == 0 && prefill_->num_live_requests() == 0;
        })) {
      return ::testing::AssertionSuccess();
    }
    return ::testing::AssertionFailure()
           << "decode " << decode_->load().used_blocks << " blocks used, "
           << decode_->num_live_requests() << " live; prefill " << prefill_->load().used_blocks
           << " used, " << prefill_->num_live_requests() << " live";
  }

 private:
  base::SimulatedClock clock_{absl::FromUnixSeconds(1000000)};
  base::MetricsRegistry decode_registry_;
  base::MetricsRegistry prefill_registry_;
  decode_worker::DecodeMetrics decode_metrics_;
  prefill_worker::PrefillMetrics prefill_metrics_;
  kvtransfer::LoopbackTransport decode_transport_;
  std::unique_ptr<kvtransfer::FaultInjectingTransport> prefill_transport_;
  DirectCommitter committer_;
  std::unique_ptr<decode_worker::DecodeEngine> decode_;
  std::unique_ptr<prefill_worker::PrefillEngine> prefill_;
};

struct Want {
  std::vector<int32_t> prompt;
  int32_t max_tokens;
  engine::SamplingParams sampling;
  std::vector<int32_t> tokens;
  std::string text;
};

Want Reference(std::vector<int32_t> prompt, int32_t max_tokens, engine::SamplingParams sampling) {
  static engine::Engine* engine = MakeEngine(1024).release();
  static engine::SequenceId seq = 1;
  engine::GenerateOptions opts;
  opts.max_tokens = max_tokens;
  opts.sampling = sampling;
  auto r = engine::Generate(*engine, seq++, prompt, opts);
  CHECK(r.ok()) << r.status();
  return Want{std::move(prompt), max_tokens, std::move(sampling), r->tokens, r->text};
}

std::vector<int32_t> Tokens(const std::string& text) {
  auto ids = TheModel().tokenizer()->Encode(text, true, false);
  CHECK(ids.ok());
  return *ids;
}

uint64_t FormulaBytes(size_t prompt_tokens) {
  const engine::ModelConfig& mc = TheModel().config();
  kvtransfer::KvLayout l;
  l.num_layers = mc.num_layers;
  l.num_kv_heads = mc.num_kv_heads;
  l.head_dim = mc.head_dim;
  l.block_size = kBlockSize;
  const uint64_t blocks = (prompt_tokens + kBlockSize - 1) / kBlockSize;
  return static_cast<uint64_t>(l.num_layers) * 2 * blocks * l.block_bytes();
}

struct Running {
  std::unique_ptr<Sink> sink = std::make_unique<Sink>();
  std::unique_ptr<Call> call = std::make_unique<Call>();
  decode_worker::Reservation reservation;
};

// Reserve on decode, prefill with the reservation; returns the handles.
std::unique_ptr<Running> Start(Cluster& c, const Want& w, const std::string& id) {
  auto r = std::make_unique<Running>();
  decode_worker::RequestSpec spec;
  spec.request_id = id;
  spec.prompt = w.prompt;
  spec.max_tokens = w.max_tokens;
  spec.sampling = w.sampling;
  c.decode().SubmitReserve(c.decode().NewRequestKey(), spec, r->sink.get());
  EXPECT_TRUE(r->sink->WaitReservation(&r->reservation));
  c.prefill().Submit(c.prefill().NewRequestKey(),
                     Cluster::JobFor(r->reservation, w.prompt, w.sampling), r->call.get());
  return r;
}

TEST(WorkerLoopbackTest, ChunkedPushesMatchReferenceAndFormula) {
  Cluster c(Options{});
  std::vector<Want> wants;
  const std::string base =
      "Once upon a time, there was a little boy named Ben. Ben liked to play with his ball in "
      "the garden. One day, he saw a big tree and";
  for (int i = 0; i < 8; ++i) {
    engine::SamplingParams sp;
    if (i % 2) {
      sp.temperature = 0.8f;
      sp.seed = 77 + i;
    }
    // 0..3 share a long prefix (prefix cache on the prefill side).
    const std::string text = i < 4 ? base + (i % 2 ? " he said" : " she ran")
                                   : std::string("The dog ") + std::string(i * 3, 'a');
    wants.push_back(Reference(Tokens(text), 20 + i * 3, sp));
  }
  std::vector<std::unique_ptr<Running>> runs;
  for (size_t i = 0; i < wants.size(); ++i)
    runs.push_back(Start(c, wants[i], absl::StrCat("r", i)));
  int cache_hits = 0;
  for (size_t i = 0; i < wants.size(); ++i) {
    SCOPED_TRACE(i);
    auto result = runs[i]->call->Wait();
    ASSERT_OK(result.status());
    EXPECT_EQ(result->kv_bytes, FormulaBytes(wants[i].prompt.size()));
    cache_hits += result->cached_prompt_tokens > 0;
    ASSERT_TRUE(runs[i]->sink->WaitDone());
    EXPECT_OK(runs[i]->sink->status());
    EXPECT_EQ(runs[i]->sink->tokens(), wants[i].tokens);
    EXPECT_EQ(runs[i]->sink->text(), wants[i].text);
  }
  EXPECT_GT(cache_hits, 0);
  EXPECT_TRUE(c.PoolsBackToZero());
}

TEST(WorkerLoopbackTest, ImportedSequencesPreemptedAndRecomputedMatchReference) {
  Options o;
  o.decode_blocks = 12;  // 4 requests of ~12 + 100 tokens need 7 blocks each at the end
  Cluster c(o);
  std::vector<Want> wants;
  for (int i = 0; i < 4; ++i) {
    engine::SamplingParams sp;
    sp.ignore_eos = true;
    if (i % 2) {
      sp.temperature = 0.8f;
      sp.seed = 5 + i;
    }
    wants.push_back(
        Reference(Tokens(absl::StrCat("Lily had ", i + 2, " red balls and a big dog.")), 100, sp));
  }
  // Reserve all first, then prefill all: they commit together and grow in
  // lockstep, so the pool runs dry for certain.
  std::vector<std::unique_ptr<Running>> runs;
  std::vector<decode_worker::Reservation> reservations(wants.size());
  for (size_t i = 0; i < wants.size(); ++i) {
    runs.push_back(std::make_unique<Running>());
    decode_worker::RequestSpec spec;
    spec.request_id = absl::StrCat("p", i);
    spec.prompt = wants[i].prompt;
    spec.max_tokens = wants[i].max_tokens;
    spec.sampling = wants[i].sampling;
    c.decode().SubmitReserve(c.decode().NewRequestKey(), spec, runs[i]->sink.get());
    ASSERT_TRUE(runs[i]->sink->WaitReservation(&reservations[i]));
  }
  for (size_t i = 0; i < wants.size(); ++i) {
    c.prefill().Submit(c.prefill().NewRequestKey(),
                       Cluster::JobFor(reservations[i], wants[i].prompt, wants[i].sampling),
                       runs[i]->call.get());
  }
  for (size_t i = 0; i < wants.size(); ++i) {
    SCOPED_TRACE(i);
    ASSERT_OK(runs[i]->call->Wait().status());
    ASSERT_TRUE(runs[i]->sink->WaitDone());
    EXPECT_OK(runs[i]->sink->status());
    EXPECT_EQ(runs[i]->sink->tokens(), wants[i].tokens);
  }
  const std::string text = c.decode_registry().RenderText();
  EXPECT_THAT(text, ::testing::Not(HasSubstr("tandem_decode_preemptions_total 0\n")));
  EXPECT_TRUE(c.PoolsBackToZero());
}

TEST(WorkerLoopbackTest, DroppedWritesFailAtTheReservationDeadline) {
  Cluster c(Options{});
  kvtransfer::FaultSpec spec;
  spec.drop = true;
  c.faults().set_faults(spec);
  const Want w = Reference(Tokens("The sun was hot and the sky was blue."), 8, {});
  const absl::Time t0 = c.clock().Now();
  auto run = Start(c, w, "dropped");
  EXPECT_EQ(run->reservation.deadline, t0 + absl::Seconds(10));  // Options::reservation_deadline
  // The writes "succeeded": the prefill worker commits, the decode worker
  // waits for bytes that never come, until the deadline and not a moment less.
  ASSERT_TRUE(Eventually([&] { return c.committer().commits() == 1; }));
  c.SyncDecode();
  c.clock().SetTime(run->reservation.deadline - absl::Nanoseconds(1));
  c.SyncDecode();
  EXPECT_FALSE(run->sink->done()) << run->sink->status();
  EXPECT_EQ(c.decode().load().reserved, 1);
  c.clock().AdvanceTime(absl::Nanoseconds(1));
  EXPECT_THAT(run->call->Wait(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("0 of " + std::to_string(FormulaBytes(w.prompt.size())) +
                                 " KV bytes arrived by the reservation deadline")));
  ASSERT_TRUE(run->sink->WaitDone());
  EXPECT_THAT(run->sink->status(), StatusIs(absl::StatusCode::kUnavailable,
                                            HasSubstr("KV transfer incomplete at the deadline")));
  EXPECT_TRUE(c.PoolsBackToZero());
  EXPECT_THAT(c.decode_registry().RenderText(),
              HasSubstr("tandem_decode_reservations_expired_total 1\n"));
}

TEST(WorkerLoopbackTest, FailedWritesFailThePrefillAndTheReservationExpires) {
  Cluster c(Options{});
  kvtransfer::FaultSpec spec;
  spec.fail_after_writes = 2;
  c.faults().set_faults(spec);
  const Want w = Reference(Tokens("The sun was hot and the sky was blue."), 8, {});
  const absl::Time t0 = c.clock().Now();
  auto run = Start(c, w, "failed");
  EXPECT_THAT(run->call->Wait(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("KV push to decode worker in-process: injected after 2 writes: injected failure")));
  // The prefill worker's abort notice ends the decode side at once: no
  // simulated time passes, let alone the 10 s reservation deadline, and the
  // blocks free without a fence.
  ASSERT_TRUE(run->sink->WaitDone());
  EXPECT_THAT(run->sink->status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("request failed: the prefill worker gave it up")));
  EXPECT_EQ(c.clock().Now(), t0);
  EXPECT_EQ(c.committer().aborts(), 1);
  EXPECT_EQ(c.committer().commits(), 0);
  EXPECT_TRUE(c.PoolsBackToZero());
  EXPECT_EQ(c.decode().load().fenced, 0);
  // The cluster still serves once the transport heals.
  c.faults().set_faults({});
  const Want ok = Reference(Tokens("Tom saw a dog."), 8, {});
  auto again = Start(c, ok, "healed");
  ASSERT_OK(again->call->Wait().status());
  ASSERT_TRUE(again->sink->WaitDone());
  EXPECT_EQ(again->sink->tokens(), ok.tokens);
  EXPECT_TRUE(c.PoolsBackToZero());
}

TEST(WorkerLoopbackTest, CancelledPrefillFreesBlocksAfterItsWrites) {
  Cluster c(Options{});
  kvtransfer::FaultSpec spec;
  spec.delay = absl::Seconds(60);  // writes stay in flight (the cancel ends them at once)
  c.faults().set_faults(spec);
  const Want w = Reference(Tokens("Sara had a toy car and a red hat."), 8, {});
  decode_worker::RequestSpec rs;
  rs.request_id = "cancelled";
  rs.prompt = w.prompt;
  rs.max_tokens = w.max_tokens;
  Sink sink;
  c.decode().SubmitReserve(c.decode().NewRequestKey(), rs, &sink);
  decode_worker::Reservation res;
  ASSERT_TRUE(sink.WaitReservation(&res));
  Call call;
  const engine::SequenceId key = c.prefill().NewRequestKey();
  c.prefill().Submit(key, Cluster::JobFor(res, w.prompt, w.sampling), &call);
  ASSERT_TRUE(Eventually([&] { return c.faults().writes() > 0; }));  // mid-push
  c.prefill().CancelKey(key);
  EXPECT_THAT(call.Wait(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("request cancelled cancelled")));
  // Once its writes ended the prefill worker told the decode worker, which
  // gave the request up (the router's own cancel finds nothing left).
  ASSERT_TRUE(sink.WaitDone());
  EXPECT_THAT(sink.status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("request cancelled: the prefill worker gave it up")));
  EXPECT_EQ(c.committer().aborts(), 1);
  EXPECT_EQ(c.committer().commits(), 0);
  absl::Notification cancelled;
  c.decode().Cancel("cancelled", [&](bool found) {
    EXPECT_FALSE(found);
    cancelled.Notify();
  });
  ASSERT_TRUE(cancelled.WaitForNotificationWithTimeout(absl::Seconds(5)));
  EXPECT_TRUE(c.PoolsBackToZero());  // no fence: the writer said it stopped
}

// `id`'s reservation, from a fresh Reserve on the decode engine.
decode_worker::Reservation Reserve(Cluster& c, const std::string& id, const Want& w, Sink* sink) {
  decode_worker::RequestSpec rs;
  rs.request_id = id;
  rs.prompt = w.prompt;
  rs.max_tokens = w.max_tokens;
  c.decode().SubmitReserve(c.decode().NewRequestKey(), rs, sink);
  decode_worker::Reservation res;
  EXPECT_TRUE(sink->WaitReservation(&res));
  return res;
}

void CancelOnDecode(Cluster& c, const std::string& id) {
  absl::Notification done;
  c.decode().Cancel(id, [&](bool found) {
    EXPECT_TRUE(found) << id;
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
}

// What a prefill worker's abort notice does: the request ends, its blocks
// free at once.
void AbortOnDecode(Cluster& c, const std::string& id) {
  decode_worker::CommitSpec abort;
  abort.request_id = id;
  abort.abort = true;
  absl::Notification done;
  c.decode().Commit(std::move(abort), [&](absl::Status st) {
    EXPECT_OK(st);
    done.Notify();
  });
  ASSERT_TRUE(done.WaitForNotificationWithTimeout(absl::Seconds(5)));
}

// The decode engine publishes its load after each loop turn: poll.
bool FencedBecomes(Cluster& c, int32_t n) {
  return Eventually([&] { return c.decode().load().fenced == n; });
}

bool Disjoint(std::vector<int32_t> a, std::vector<int32_t> b) {
  std::sort(a.begin(), a.end());
  std::sort(b.begin(), b.end());
  std::vector<int32_t> both;
  std::set_intersection(a.begin(), a.end(), b.begin(), b.end(), std::back_inserter(both));
  return both.empty();
}

// The router cancels a reservation while the prefill worker is still
// writing into it (writes delayed in flight). The decode worker must not
// hand those blocks to anyone until the writer has stopped: a new
// reservation gets other blocks, and the fence lifts when the prefill
// worker's late commit (refused: NotFound) says its writes are over.
TEST(WorkerLoopbackTest, ReservationCancelledMidWriteIsFencedUntilTheWriterStops) {
  Cluster c(Options{});
  kvtransfer::FaultSpec spec;
  spec.delay = absl::Seconds(1);  // real time: the writes land after the checks below
  c.faults().set_faults(spec);
  const Want w = Reference(Tokens("Lily found a shiny stone near the river and she"), 8, {});
  Sink sink;
  decode_worker::RequestSpec rs;
  rs.request_id = "fenced";
  rs.prompt = w.prompt;
  rs.max_tokens = w.max_tokens;
  c.decode().SubmitReserve(c.decode().NewRequestKey(), rs, &sink);
  decode_worker::Reservation res;
  ASSERT_TRUE(sink.WaitReservation(&res));
  Call call;
  c.prefill().Submit(c.prefill().NewRequestKey(), Cluster::JobFor(res, w.prompt, w.sampling),
                     &call);
  ASSERT_TRUE(Eventually([&] { return c.faults().writes() > 0; }));  // writes are in flight
  CancelOnDecode(c, "fenced");
  ASSERT_TRUE(sink.WaitDone());
  EXPECT_THAT(sink.status(),
              StatusIs(absl::StatusCode::kCancelled, HasSubstr("request fenced cancelled")));
  ASSERT_TRUE(FencedBecomes(c, 1));
  EXPECT_EQ(c.decode().load().used_blocks, static_cast<int32_t>(res.block_ids.size()));
  EXPECT_THAT(c.decode_registry().RenderText(), HasSubstr("tandem_decode_fenced_reservations 1\n"));

  // No simulated time passes in this test: only the writer's word can lift it.
  Sink next_sink;
  const std::vector<int32_t> next = Reserve(c, "next", w, &next_sink).block_ids;
  EXPECT_TRUE(Disjoint(res.block_ids, next)) << "a fenced block was handed out again";

  // The prefill worker finishes its writes and commits: NotFound, which it
  // reports, and the fence goes.
  EXPECT_THAT(call.Wait(),
              StatusIs(absl::StatusCode::kNotFound,
                       HasSubstr("commit: no reservation for request fenced (cancelled, "
                                 "expired or never made)")));
  EXPECT_TRUE(FencedBecomes(c, 0));
  AbortOnDecode(c, "next");
  EXPECT_TRUE(c.PoolsBackToZero());
}

// A writer that never reports (a killed prefill worker): the fence lifts
// `fence_grace` after the reservation's deadline, not a nanosecond before.
TEST(WorkerLoopbackTest, FenceWithoutWordFromTheWriterLiftsAfterDeadlineAndGrace) {
  Options o;
  o.reservation_deadline = absl::Seconds(2);
  o.fence_grace = absl::Seconds(3);
  Cluster c(o);
  const Want w = Reference(Tokens("Max ran to the park with his red kite."), 8, {});
  Sink sink;
  const absl::Time t0 = c.clock().Now();
  const decode_worker::Reservation orphan = Reserve(c, "orphan", w, &sink);
  EXPECT_EQ(orphan.deadline, t0 + absl::Seconds(2));
  CancelOnDecode(c, "orphan");  // no prefill worker ever wrote or spoke
  ASSERT_TRUE(FencedBecomes(c, 1));
  Sink other_sink;
  EXPECT_TRUE(Disjoint(orphan.block_ids, Reserve(c, "other", w, &other_sink).block_ids));
  AbortOnDecode(c, "other");

  // Past the deadline, inside the grace: still fenced, blocks still held.
  c.clock().SetTime(orphan.deadline + absl::Seconds(3) - absl::Nanoseconds(1));
  c.SyncDecode();
  EXPECT_EQ(c.decode().load().fenced, 1);
  EXPECT_EQ(c.decode().load().used_blocks, static_cast<int32_t>(orphan.block_ids.size()));
  // Deadline + grace: lifted (the engine sleeps until then; the clock wakes it).
  ASSERT_TRUE(c.SleepsUntil(orphan.deadline + absl::Seconds(3)));
  c.clock().AdvanceTime(absl::Nanoseconds(1));
  EXPECT_TRUE(FencedBecomes(c, 0));
  EXPECT_TRUE(c.PoolsBackToZero());
}

// A Reserve the pool cannot serve yet waits in a FIFO queue (reported as
// waiting) instead of failing; it gets its reservation the moment blocks
// free and still decodes the reference tokens. One whose client deadline
// passes while queued fails DEADLINE_EXCEEDED; nothing leaks.
TEST(WorkerLoopbackTest, ReserveQueuesUntilThePoolHasItsBlocks) {
  Options o;
  o.decode_blocks = 4;
  Cluster c(o);
  std::vector<int32_t> prompt = {1};
  for (int i = 0; i < 39; ++i) prompt.push_back(3 + (i * 37) % 500);  // 40 tokens: 3 blocks
  engine::SamplingParams greedy;
  greedy.ignore_eos = true;
  const Want w = Reference(prompt, 12, greedy);

  Sink holder_sink;
  ASSERT_EQ(Reserve(c, "holder", w, &holder_sink).block_ids.size(), 3u);  // 1 block left

  Sink queued_sink;
  decode_worker::RequestSpec rs;
  rs.request_id = "queued";
  rs.prompt = w.prompt;
  rs.max_tokens = w.max_tokens;
  rs.sampling = w.sampling;
  c.decode().SubmitReserve(c.decode().NewRequestKey(), rs, &queued_sink);
  Sink late_sink;
  decode_worker::RequestSpec late = rs;
  late.request_id = "late";
  late.deadline = c.clock().Now() + absl::Seconds(1);
  c.decode().SubmitReserve(c.decode().NewRequestKey(), late, &late_sink);

  // Both wait; the late one up to its client deadline, not a nanosecond less.
  ASSERT_TRUE(Eventually([&] { return c.decode().load().waiting == 2; }));
  c.clock().SetTime(late.deadline - absl::Nanoseconds(1));
  c.SyncDecode();
  EXPECT_FALSE(late_sink.done()) << late_sink.status();
  EXPECT_EQ(c.decode().load().waiting, 2);
  ASSERT_TRUE(c.SleepsUntil(late.deadline));
  c.clock().AdvanceTime(absl::Nanoseconds(1));
  ASSERT_TRUE(late_sink.WaitDone());
  EXPECT_THAT(late_sink.status(),
              StatusIs(absl::StatusCode::kDeadlineExceeded,
                       HasSubstr("reserve late: the deadline passed while waiting for KV blocks")));
  EXPECT_FALSE(queued_sink.has_reservation());
  EXPECT_FALSE(queued_sink.done());
  EXPECT_TRUE(Eventually([&] { return c.decode().load().waiting == 1; }));

  AbortOnDecode(c, "holder");  // its 3 blocks free
  decode_worker::Reservation res;
  ASSERT_TRUE(queued_sink.WaitReservation(&res));
  Call call;
  c.prefill().Submit(c.prefill().NewRequestKey(), Cluster::JobFor(res, w.prompt, w.sampling),
                     &call);
  ASSERT_OK(call.Wait().status());
  ASSERT_TRUE(queued_sink.WaitDone());
  ASSERT_OK(queued_sink.status());
  EXPECT_EQ(queued_sink.tokens(), w.tokens);
  EXPECT_TRUE(c.PoolsBackToZero());
  // holder and queued got reservations; late never did.
  EXPECT_THAT(c.decode_registry().RenderText(),
              HasSubstr("tandem_decode_reservation_wait_seconds_count 2\n"));
}

// A prefill worker that refuses a request (here: its admission queue is
// full) never writes into the reservation and says so: the decode worker
// ends the request and frees its blocks at once, with no fence, long before
// the 10 s reservation deadline.
TEST(WorkerLoopbackTest, RefusedPrefillFreesTheReservationAtOnce) {
  Options o;
  o.prefill_max_queued = 0;
  Cluster c(o);
  const Want w = Reference(Tokens("Ann had a small blue cup."), 8, {});
  auto run = Start(c, w, "refused");
  EXPECT_THAT(run->call->Wait(), StatusIs(absl::StatusCode::kResourceExhausted,
                                           HasSubstr("prefill admission queue full (0 requests")));
  ASSERT_TRUE(run->sink->WaitDone());
  EXPECT_THAT(run->sink->status(),
              StatusIs(absl::StatusCode::kUnavailable,
                       HasSubstr("request refused: the prefill worker gave it up")));
  EXPECT_EQ(c.committer().aborts(), 1);
  EXPECT_TRUE(c.PoolsBackToZero());
  EXPECT_THAT(c.decode_registry().RenderText(),
              HasSubstr("tandem_decode_reservation_aborts_total 1\n"));
}

// Stop() aborts running prefills and waits for their writes and commits to
// end, but one that never ends (here a commit the decode worker never
// answers) holds it only `shutdown_bound` on the engine's clock; then the
// job completes with the stop reason.
TEST(WorkerLoopbackTest, PrefillStopWaitsForAStuckCommitOnlyUntilTheShutdownBound) {
  Options o;
  o.prefill_shutdown_bound = absl::Seconds(3);
  Cluster c(o);
  c.committer().set_hold(true);
  const Want w = Reference(Tokens("Ben had a big red ball."), 8, {});
  auto run = Start(c, w, "stuck");
  ASSERT_TRUE(Eventually([&] { return c.committer().commits() == 1; }));
  const absl::Time t_stop = c.clock().Now();
  std::atomic<bool> stopped{false};
  std::thread stopper([&] {
    c.prefill().Stop();
    stopped = true;
  });
  absl::Cleanup join = [&] {
    c.clock().AdvanceTime(absl::Hours(1));  // lets Stop() return should a check fail
    stopper.join();
  };
  // The engine thread sleeps until the bound; just before it, Stop still waits.
  const absl::Time bound = t_stop + absl::Seconds(3);
  ASSERT_TRUE(c.SleepsUntil(bound));
  c.clock().SetTime(bound - absl::Nanoseconds(1));
  EXPECT_FALSE(stopped.load());
  c.clock().AdvanceTime(absl::Nanoseconds(1));
  EXPECT_TRUE(Eventually([&] { return stopped.load(); }));
  EXPECT_THAT(run->call->Wait(),
              StatusIs(absl::StatusCode::kUnavailable, HasSubstr("prefill worker shutting down")));
  EXPECT_EQ(c.prefill().num_live_requests(), 0);
  CancelOnDecode(c, "stuck");  // the sink goes before the cluster
  ASSERT_TRUE(run->sink->WaitDone());
}

TEST(WorkerLoopbackTest, PrefillBlockListenerReportsThePromptsBlockNames) {
  absl::Mutex mu;
  std::set<engine::BlockHash> names;  // applied as the router's index applies them
  bool resynced = false;
  Options o;
  o.prefill_block_listener = [&](const engine::KvBlockEvents& ev) {
    absl::MutexLock lock(&mu);
    if (ev.resync) {
      names.clear();
      resynced = true;
    }
    for (engine::BlockHash h : ev.removed) names.erase(h);
    names.insert(ev.added.begin(), ev.added.end());
  };
  Cluster c(o);
  const Want w = Reference(Tokens("Once upon a time, there was a little boy named Ben. Ben liked "
                                  "to play with his ball in the garden."),
                           4, engine::SamplingParams());
  ASSERT_GE(w.prompt.size(), 2u * kBlockSize);
  std::set<engine::BlockHash> want;
  engine::BlockHash h = engine::ModelSeedHash(c.prefill().layout().model_id);
  for (size_t i = 0; i + kBlockSize <= w.prompt.size(); i += kBlockSize) {
    h = engine::ChainBlockHash(h, absl::MakeConstSpan(w.prompt).subspan(i, kBlockSize));
    want.insert(h);
  }
  auto run = Start(c, w, "listened");
  ASSERT_OK(run->call->Wait().status());
  ASSERT_TRUE(run->sink->WaitDone());
  EXPECT_TRUE(Eventually([&] {
    absl::MutexLock lock(&mu);
    return resynced && names == want;
  })) << "the listener's names differ from the prompt's " << want.size() << " full blocks";
  EXPECT_TRUE(c.PoolsBackToZero());
}

}  // namespace
}  // namespace tandem
