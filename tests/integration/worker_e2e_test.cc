// End-to-end: the real tandem-prefill and tandem-decode binaries as child
// processes on 127.0.0.1 (ports picked by the workers, read from their READY
// line), with this test acting as the router (Decode.Reserve ->
// Prefill.Prefill -> read the token stream) over real gRPC and real UCX.
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
//  - A prefill worker SIGKILLed before it commits (stopped, sent the
//    Prefill, killed): the decode worker frees the reservation at its
//    deadline and the client's stream ends UNAVAILABLE.
//  - A decode worker SIGKILLed mid-stream: the client's stream ends
//    UNAVAILABLE within 5 s; the prefill worker stays at zero used blocks.
//  - Bad input (token id out of range, prompt + max_tokens over the context,
//    max_tokens <= 0, bad sampling parameters) is INVALID_ARGUMENT from
//    Reserve, Generate and Prefill; a reservation with another KV layout is
//    FAILED_PRECONDITION naming both; the workers keep serving.
//  - Preemption: a colocated worker with a pool too small for its 4
//    concurrent requests preempts (counted in /metrics) and still matches
//    the reference.
//  - Control.Watch: snapshot first (id, role, model, layout, load), then
//    heartbeats; grpc.health.v1 reports SERVING.
//  - SIGTERM: an in-flight request finishes, the process exits 0.
//
// Known gaps: no RDMA NIC here, so native UCX puts are not exercised (UCX
// 1.13 uses active messages over sm and tcp); a prefill worker killed in the
// middle of its writes (rather than before them) is not staged.

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <signal.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "absl/time/time.h"
#include "common/base/logging.h"
#include "common/engine/engine.h"
#include "common/engine/generation.h"
#include "common/engine/model.h"
#include "gmock/gmock.h"
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_layout.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/testing/status_matchers.h"
#include "tests/testing/test_paths.h"
#include "tests/testing/watch_load.h"
#include "tests/testing/worker_process.h"

namespace tandem {
namespace {

namespace v1 = ::tandem::v1;
using ::tandem::testing::WorkerProcess;
using ::testing::HasSubstr;

constexpr int kClients = 4;
constexpr int kKvBlocks = 1024;
constexpr int kBlockSize = 16;

std::string ModelPath() {
  return ::tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf");
}
std::string Bin(const std::string& name) { return ::tandem::testing::BinaryDir() + "/bin/" + name; }

std::vector<std::string> Flags(std::vector<std::string> extra) {
  std::vector<std::string> f = {"--model=" + ModelPath(),
                                "--listen=127.0.0.1:0",
                                "--metrics_port=0",
                                "--metrics_host=127.0.0.1",
                                "--threads=1",
                                absl::StrCat("--kv_blocks=", kKvBlocks),
                                absl::StrCat("--block_size=", kBlockSize),
                                "--chunk_size=32",
                                "--token_budget=64",
                                "--heartbeat_interval=200ms",
                                "--drain_grace=10s"};
  f.insert(f.end(), extra.begin(), extra.end());
  return f;
}

std::vector<std::string> UcxFlags(const std::string& tls) {
  std::vector<std::string> f = {"--transport=ucx", "--ucx_tls=" + tls};
  if (tls == "tcp") f.push_back("--ucx_net_devices=lo");
  return f;
}

// --- the reference -----------------------------------------------------------

struct Request {
  v1::DecodeSubmit submit;
  std::vector<int32_t> want_tokens;
  std::string want_text;
  // The first sampled token, also when it is a stop token (which
  // want_tokens leaves out): what the prefill worker returns.
  int32_t want_first_token = -1;
};

class Reference {
 public:
  static Reference& Get() {
    static Reference* r = new Reference();
    return *r;
  }
  const engine::Model& model() const { return *model_; }
  const engine::Tokenizer& tokenizer() const { return *model_->tokenizer(); }

  // Runs Generate() for `submit` and stores the expected output.
  Request Make(v1::DecodeSubmit submit) {
    absl::MutexLock lock(&mu_);
    engine::GenerateOptions opts;
    opts.max_tokens = submit.max_tokens();
    const v1::SamplingParams& p = submit.sampling();
    opts.sampling.temperature = p.temperature();
    opts.sampling.top_p = p.top_p() == 0 ? 1.0f : p.top_p();
    opts.sampling.seed = p.seed();
    opts.sampling.stop_strings.assign(p.stop().begin(), p.stop().end());
    std::vector<int32_t> prompt(submit.prompt_ids().begin(), submit.prompt_ids().end());
    absl::StatusOr<engine::GenerateResult> r = engine::Generate(*engine_, next_seq_++, prompt, opts);
    CHECK(r.ok()) << r.status();
    // Once more for one token that nothing stops: the first sample itself.
    opts.max_tokens = 1;
    opts.sampling.ignore_eos = true;
    opts.sampling.stop_strings.clear();
    absl::StatusOr<engine::GenerateResult> first = engine::Generate(*engine_, next_seq_++, prompt, opts);
    CHECK(first.ok()) << first.status();
    CHECK_EQ(first->tokens.size(), 1u);
    Request req;
    req.submit = std::move(submit);
    req.want_tokens = r->tokens;
    req.want_text = r->text;
    req.want_first_token = first->tokens[0];
    return req;
  }

 private:
  Reference() {
    auto m = engine::Model::Load(ModelPath());
    CHECK(m.ok()) << m.status();
    model_ = std::move(*m);
    engine::EngineConfig ec;
    ec.num_threads = 1;
    ec.num_kv_blocks = kKvBlocks;
    ec.block_size = kBlockSize;
    auto e = engine::Engine::Create(*model_, ec);
    CHECK(e.ok()) << e.status();
    engine_ = std::move(*e);
  }

  absl::Mutex mu_;
  std::unique_ptr<engine::Model> model_;
  std::unique_ptr<engine::Engine> engine_ ABSL_GUARDED_BY(mu_);
  engine::SequenceId next_seq_ ABSL_GUARDED_BY(mu_) = 1;
};

// 20 requests: varied lengths (several blocks, several chunks), shared
// prefixes, greedy and seeded temperature 0.8, some with a stop string.
std::vector<Request> MakeRequests(const std::string& id_prefix) {
  const std::vector<std::string> texts = {
      "Once upon a time, there was a little girl named Lily.",
      "The cat sat on the mat and looked at the big red ball.",
      "Tom and his mom went to the park. They saw a dog.",
      "One day, a little bird wanted to fly high in the sky. The bird was very happy and it "
      "sang a song to all the animals in the forest.",
      "Sara had a toy car.",
      "The sun was hot.",
      "Once upon a time, there was a little boy named Ben. Ben liked to play with his ball "
      "in the garden. One day, he saw a big tree and he wanted to climb it. His mom said",
      "Once upon a time, there was a little boy named Ben. Ben liked to play with his ball "
      "in the garden. One day, he saw a big tree and he wanted to climb it. His dad said",
      "Once upon a time, there was a little boy named Ben. Ben liked to play with his ball "
      "in the garden. One day, he saw a big tree and he wanted to climb it. The tree said",
      "Lily and Max were friends. They liked to share their toys and play games together. "
      "One day, Max found a shiny stone near the river and showed it to Lily. Lily said, "
      "\"Wow, it is so pretty! Can I hold it?\" Max smiled and gave her the stone.",
  };
  std::vector<Request> out;
  const engine::Tokenizer& tok = Reference::Get().tokenizer();
  for (int i = 0; i < 20; ++i) {
    v1::DecodeSubmit s;
    s.set_request_id(absl::StrCat(id_prefix, "-", i));
    auto ids = tok.Encode(texts[i % texts.size()], /*add_bos=*/true, /*parse_special=*/false);
    CHECK(ids.ok()) << ids.status();
    for (int32_t id : *ids) s.add_prompt_ids(id);
    s.set_max_tokens(12 + (i * 7) % 36);
    if (i % 2 == 1) {
      s.mutable_sampling()->set_temperature(0.8f);
      s.mutable_sampling()->set_seed(1000 + i);
    }
    if (i % 5 == 3) {
      s.mutable_sampling()->add_stop(".");
    }
    out.push_back(Reference::Get().Make(std::move(s)));
  }
  return out;
}

// --- the router's side -------------------------------------------------------

struct Outcome {
  grpc::Status status;
  std::vector<int32_t> tokens;
  std::string text;
  v1::FinishReason finish = v1::FINISH_REASON_UNSPECIFIED;
  bool got_reservation = false;
  v1::KvReservation reservation;
  bool prefilled = false;
  v1::PrefillResponse prefill;
};

void Absorb(const v1::GenerateResponse& r, Outcome* out) {
  for (const auto& t : r.tokens()) out->tokens.push_back(t.token());
  out->text += r.text();
  if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) out->finish = r.finish_reason();
}

std::chrono::system_clock::time_point In(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

Outcome RunDisaggregated(v1::Decode::Stub& decode, v1::Prefill::Stub& prefill,
                         const v1::DecodeSubmit& submit) {
  Outcome out;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(60)));
  v1::ReserveRequest req;
  *req.mutable_request() = submit;
  auto reader = decode.Reserve(&ctx, req);
  v1::DecodeEvent ev;
  if (!reader->Read(&ev) || !ev.has_reservation()) {
    out.status = reader->Finish();
    return out;
  }
  out.got_reservation = true;
  out.reservation = ev.reservation();
  {
    grpc::ClientContext pctx;
    pctx.set_deadline(In(absl::Seconds(60)));
    v1::PrefillRequest preq;
    *preq.mutable_request() = submit;
    *preq.mutable_reservation() = ev.reservation();
    grpc::Status ps = prefill.Prefill(&pctx, preq, &out.prefill);
    if (!ps.ok()) {
      ctx.TryCancel();
      while (reader->Read(&ev)) {
      }
      reader->Finish().ok();
      out.status = ps;
      return out;
    }
    out.prefilled = true;
  }
  while (reader->Read(&ev)) {
    if (ev.has_tokens()) Absorb(ev.tokens(), &out);
  }
  out.status = reader->Finish();
  return out;
}

Outcome RunColocated(v1::Decode::Stub& decode, const v1::DecodeSubmit& submit) {
  Outcome out;
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(60)));
  auto reader = decode.Generate(&ctx, submit);
  v1::GenerateResponse r;
  while (reader->Read(&r)) Absorb(r, &out);
  out.status = reader->Finish();
  return out;
}

// Runs `fn(i)` for i in [0, n) from kClients threads.
void FromClients(int n, const std::function<void(int)>& fn) {
  std::vector<std::thread> threads;
  for (int c = 0; c < kClients; ++c) {
    threads.emplace_back([&, c] {
      for (int i = c; i < n; i += kClients) fn(i);
    });
  }
  for (auto& t : threads) t.join();
}

std::shared_ptr<grpc::Channel> Dial(const WorkerProcess& w) {
  return grpc::CreateChannel(w.address(), grpc::InsecureChannelCredentials());
}

// A disaggregated request under way: opens Decode.Reserve (deadline 60 s,
// on `ctx`), runs the prefill with its reservation and reads until at least
// `min_tokens` tokens streamed. Null (with a test failure) otherwise.
std::unique_ptr<grpc::ClientReader<v1::DecodeEvent>> StartStreaming(v1::Decode::Stub& decode,
                                                                    v1::Prefill::Stub& prefill,
                                                                    const v1::DecodeSubmit& submit,
                                                                    int min_tokens,
                                                                    grpc::ClientContext* ctx) {
  ctx->set_deadline(In(absl::Seconds(60)));
  v1::ReserveRequest req;
  *req.mutable_request() = submit;
  auto reader = decode.Reserve(ctx, req);
  v1::DecodeEvent ev;
  if (!reader->Read(&ev) || !ev.has_reservation()) {
    ADD_FAILURE() << "no reservation for " << submit.request_id();
    return nullptr;
  }
  grpc::ClientContext pctx;
  v1::PrefillRequest preq;
  *preq.mutable_request() = submit;
  *preq.mutable_reservation() = ev.reservation();
  v1::PrefillResponse presp;
  const grpc::Status ps = prefill.Prefill(&pctx, preq, &presp);
  if (!ps.ok()) {
    ADD_FAILURE() << "prefill of " << submit.request_id() << ": " << ps.error_message();
    return nullptr;
  }
  int tokens = 0;
  while (tokens < min_tokens && reader->Read(&ev)) tokens += ev.tokens().tokens_size();
  if (tokens < min_tokens) {
    ADD_FAILURE() << submit.request_id() << ": stream ended after " << tokens << " tokens";
    return nullptr;
  }
  return reader;
}

// Watches `w`'s load until `done(used blocks, load)` holds.
::testing::AssertionResult WatchLoadUntil(
    const WorkerProcess& w, const std::function<bool(int, const v1::WorkerLoad&)>& done,
    const std::string& what, absl::Duration timeout) {
  return testing::WatchLoadUntil(w.address(), w.name(), done, what, timeout);
}

// Watches `w` until its pool has no used blocks (total - free == 0) and no requests.
::testing::AssertionResult UsedBlocksReachZero(const WorkerProcess& w,
                                               absl::Duration timeout = absl::Seconds(5)) {
  return WatchLoadUntil(w, testing::Idle, "back to zero used blocks", timeout);
}

// /metrics of `w` as name{labels} -> value.
std::map<std::string, double> Metrics(const WorkerProcess& w) {
  std::map<std::string, double> out;
  httplib::Client cli("127.0.0.1", w.metrics_port());
  cli.set_read_timeout(5, 0);
  auto res = cli.Get("/metrics");
  if (!res || res->status != 200) return out;
  for (absl::string_view line : absl::StrSplit(res->body, '\n')) {
    if (line.empty() || line[0] == '#') continue;
    const size_t sp = line.rfind(' ');
    double v = 0;
    if (sp != absl::string_view::npos && absl::SimpleAtod(line.substr(sp + 1), &v)) {
      out[std::string(line.substr(0, sp))] = v;
    }
  }
  return out;
}

// grpc.health.v1.Health/Check for the server as a whole, through the generic
// stub (the health protos are not installed): the response's field 1 is the
// status enum (1 SERVING, 2 NOT_SERVING); -1 on a failed call.
int HealthStatus(const WorkerProcess& w) {
  grpc::GenericStub generic(Dial(w));
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(5)));
  grpc::Slice empty("", 0);  // an empty HealthCheckRequest: service ""
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  absl::Mutex mu;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, "/grpc.health.v1.Health/Check", grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      absl::MutexLock lock(&mu);
                      status = s;
                      done = true;
                    });
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
  }
  if (!status.ok()) return -1;
  std::vector<grpc::Slice> slices;
  if (!response.Dump(&slices).ok()) return -1;
  std::string bytes;
  for (const grpc::Slice& sl : slices) {
    bytes.append(reinterpret_cast<const char*>(sl.begin()), sl.size());
  }
  if (bytes.size() == 2 && bytes[0] == 0x08) return bytes[1];
  return bytes.empty() ? 0 : -1;
}

// KV bytes of a prompt by the KvLayout formula.
uint64_t KvBytes(int prompt_tokens) {
  const engine::ModelConfig& mc = Reference::Get().model().config();
  kvtransfer::KvLayout layout;
  layout.num_layers = mc.num_layers;
  layout.num_kv_heads = mc.num_kv_heads;
  layout.head_dim = mc.head_dim;
  layout.block_size = kBlockSize;
  layout.dtype = engine::GgmlType::kF32;
  const int blocks = (prompt_tokens + kBlockSize - 1) / kBlockSize;
  return static_cast<uint64_t>(layout.num_layers) * 2 * blocks * layout.block_bytes();
}

// SIGTERM `w` and expect a drained exit 0.
::testing::AssertionResult ExitsCleanlyOnSigterm(WorkerProcess& w) {
  w.Signal(SIGTERM);
  absl::StatusOr<int> code = w.Wait(absl::Seconds(20));
  if (code.ok() && *code == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << w.name() << " did not exit 0 on SIGTERM: "
         << (code.ok() ? absl::StrCat("exit ", *code) : code.status().ToString()) << "\n"
         << w.Tail();
}

// --- the cluster ---------------------------------------------------------------

struct Pair {
  std::unique_ptr<WorkerProcess> prefill;
  std::unique_ptr<WorkerProcess> decode;
};

class WorkerE2eTest : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Reference::Get();
    auto start = [](const std::string& bin, std::vector<std::string> flags,
                    std::unique_ptr<WorkerProcess>* out) {
      auto p = WorkerProcess::Start(Bin(bin), Flags(std::move(flags)));
      if (!p.ok()) {
        setup_error_ += absl::StrCat(p.status().ToString(), "\n");
        return;
      }
      *out = std::move(*p);
    };
    for (const std::string tls : {"sm", "tcp"}) {
      Pair& pair = pairs_[tls];
      std::vector<std::string> f = UcxFlags(tls);
      f.push_back("--role=prefill");
      // Chunks that end inside a block (20 of 16-token blocks): a block is
      // pushed once, when complete, whatever the chunking.
      if (tls == "tcp") f.push_back("--chunk_size=20");
      start("tandem-prefill", f, &pair.prefill);
      f = UcxFlags(tls);
      f.push_back("--role=decode");
      start("tandem-decode", f, &pair.decode);
    }
    start("tandem-decode", {"--role=colocated"}, &colocated_);
  }
  // SIGTERM, not SIGKILL: every worker that served this suite must drain and
  // exit 0 (under ASan this is also where leaks and shutdown races show).
  static void TearDownTestSuite() {
    std::vector<WorkerProcess*> all = {colocated_.get()};
    for (auto& [tls, pair] : pairs_) {
      all.push_back(pair.decode.get());
      all.push_back(pair.prefill.get());
    }
    for (WorkerProcess* w : all) {
      if (w != nullptr) w->Signal(SIGTERM);
    }
    for (WorkerProcess* w : all) {
      if (w == nullptr) continue;
      absl::StatusOr<int> code = w->Wait(absl::Seconds(20));
      if (!code.ok() || *code != 0) {
        ADD_FAILURE() << w->name() << " did not exit 0 on SIGTERM: "
                      << (code.ok() ? absl::StrCat("exit ", *code) : code.status().ToString())
                      << "\n"
                      << w->Tail();
      }
    }
    pairs_.clear();
    colocated_.reset();
  }

  void SetUp() override {
    ASSERT_TRUE(setup_error_.empty()) << "cluster did not start:\n" << setup_error_;
  }

  void CheckDisaggregated(const std::string& tls) {
    Pair& pair = pairs_.at(tls);
    auto decode = v1::Decode::NewStub(Dial(*pair.decode));
    auto prefill = v1::Prefill::NewStub(Dial(*pair.prefill));
    const std::string received =
        "tandem_kv_transfer_bytes_total{transport=\"ucx\",direction=\"received\"}";
    const double received_before = Metrics(*pair.decode)[received];
    const std::vector<Request> reqs = MakeRequests("disagg-" + tls);
    std::vector<Outcome> outs(reqs.size());
    const absl::Time t0 = absl::Now();
    FromClients(reqs.size(),
                [&](int i) { outs[i] = RunDisaggregated(*decode, *prefill, reqs[i].submit); });
    const absl::Duration took = absl::Now() - t0;
    uint64_t want_bytes = 0;
    int cached_hits = 0;
    for (size_t i = 0; i < reqs.size(); ++i) {
      SCOPED_TRACE(reqs[i].submit.request_id());
      ASSERT_TRUE(outs[i].status.ok()) << outs[i].status.error_message() << "\n"
                                       << pair.decode->Tail() << pair.prefill->Tail();
      EXPECT_EQ(outs[i].tokens, reqs[i].want_tokens);
      EXPECT_EQ(outs[i].text, reqs[i].want_text);
      EXPECT_NE(outs[i].finish, v1::FINISH_REASON_UNSPECIFIED);
      const uint64_t bytes = KvBytes(reqs[i].submit.prompt_ids_size());
      EXPECT_EQ(outs[i].reservation.expected_bytes(), bytes);
      EXPECT_EQ(outs[i].prefill.kv_bytes(), bytes);
      EXPECT_EQ(outs[i].prefill.first_token(), reqs[i].want_first_token);
      if (!reqs[i].want_tokens.empty()) {
        EXPECT_EQ(reqs[i].want_tokens[0], reqs[i].want_first_token);
      }
      want_bytes += bytes;
      cached_hits += outs[i].prefill.cached_prompt_tokens() > 0;
    }
    // Prompts 6..8 (and 16..18) share 2+ blocks: the prefill worker's
    // prefix cache served some of them, and their KV was still pushed.
    EXPECT_GT(cached_hits, 0);
    EXPECT_EQ(Metrics(*pair.decode)[received] - received_before, static_cast<double>(want_bytes));
    std::printf(
        "[ measure  ] disaggregated ucx/%s: %zu requests from %d clients in %.3f s, "
        "%llu KV bytes\n",
        tls.c_str(), reqs.size(), kClients, absl::ToDoubleSeconds(took),
        static_cast<unsigned long long>(want_bytes));
    EXPECT_TRUE(UsedBlocksReachZero(*pair.decode));
    EXPECT_TRUE(UsedBlocksReachZero(*pair.prefill));
    std::map<std::string, double> m = Metrics(*pair.decode);
    EXPECT_EQ(m["tandem_decode_kv_blocks_used"], 0);
    EXPECT_EQ(Metrics(*pair.prefill)["tandem_prefill_kv_blocks_used"], 0);
  }

  static inline std::string setup_error_;
  static inline std::map<std::string, Pair> pairs_;
  static inline std::unique_ptr<WorkerProcess> colocated_;
};

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

v1::DecodeSubmit LongRequest(const std::string& id, int max_tokens = 1500) {
  v1::DecodeSubmit s;
  s.set_request_id(id);
  auto ids = Reference::Get().tokenizer().Encode("Once upon a time", true, false);
  for (int32_t t : *ids) s.add_prompt_ids(t);
  s.set_max_tokens(max_tokens);
  s.mutable_sampling()->set_ignore_eos(true);
  return s;
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
}  // namespace tandem
