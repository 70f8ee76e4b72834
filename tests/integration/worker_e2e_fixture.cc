#include "tests/integration/worker_e2e_fixture.h"

#include <grpcpp/grpcpp.h>
#include <httplib.h>
#include <signal.h>

#include <cstdio>
#include <functional>
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
#include "grpcpp/generic/generic_stub.h"
#include "gtest/gtest.h"
#include "kvtransfer/kv_layout.h"
#include "tandem/v1/worker.grpc.pb.h"
#include "tests/testing/test_paths.h"
#include "tests/testing/watch_load.h"
#include "tests/testing/worker_process.h"

namespace tandem::integration {

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

Request Reference::Make(v1::DecodeSubmit submit) {
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
  absl::StatusOr<engine::GenerateResult> first =
      engine::Generate(*engine_, next_seq_++, prompt, opts);
  CHECK(first.ok()) << first.status();
  CHECK_EQ(first->tokens.size(), 1u);
  Request req;
  req.submit = std::move(submit);
  req.want_tokens = r->tokens;
  req.want_text = r->text;
  req.want_first_token = first->tokens[0];
  return req;
}

Reference::Reference() {
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

void Absorb(const v1::GenerateResponse& r, Outcome* out) {
  for (const auto& t : r.tokens()) out->tokens.push_back(t.token());
  out->text += r.text();
  if (r.finish_reason() != v1::FINISH_REASON_UNSPECIFIED) out->finish = r.finish_reason();
}

std::chrono::system_clock::time_point In(absl::Duration d) {
  return absl::ToChronoTime(absl::Now() + d);
}

Outcome RunDisaggregated(v1::Decode::Stub& decode, v1::Prefill::Stub& prefill,
                         const v1::DecodeSubmit& submit,
                         const std::function<void(v1::PrefillRequest&)>& alter) {
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
    if (alter) alter(preq);
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

::testing::AssertionResult WatchLoadUntil(
    const WorkerProcess& w, const std::function<bool(int, const v1::WorkerLoad&)>& done,
    const std::string& what, absl::Duration timeout) {
  return testing::WatchLoadUntil(w.address(), w.name(), done, what, timeout);
}

::testing::AssertionResult UsedBlocksReachZero(const WorkerProcess& w, absl::Duration timeout) {
  return WatchLoadUntil(w, testing::Idle, "back to zero used blocks", timeout);
}

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

grpc::Status CallRaw(const std::shared_ptr<grpc::Channel>& channel, const std::string& method,
                     std::string* response_bytes) {
  grpc::GenericStub generic(channel);
  grpc::ClientContext ctx;
  ctx.set_deadline(In(absl::Seconds(5)));
  grpc::Slice empty("", 0);  // an empty message: every field at its default
  grpc::ByteBuffer request(&empty, 1);
  grpc::ByteBuffer response;
  absl::Mutex mu;
  bool done = false;
  grpc::Status status;
  generic.UnaryCall(&ctx, method, grpc::StubOptions(), &request, &response,
                    [&](grpc::Status s) {
                      absl::MutexLock lock(&mu);
                      status = s;
                      done = true;
                    });
  {
    absl::MutexLock lock(&mu);
    mu.Await(absl::Condition(&done));
  }
  if (status.ok() && response_bytes != nullptr) {
    std::vector<grpc::Slice> slices;
    if (!response.Dump(&slices).ok()) return grpc::Status(grpc::StatusCode::INTERNAL, "dump");
    for (const grpc::Slice& sl : slices) {
      response_bytes->append(reinterpret_cast<const char*>(sl.begin()), sl.size());
    }
  }
  return status;
}

int HealthStatus(const std::shared_ptr<grpc::Channel>& channel) {
  std::string bytes;
  if (!CallRaw(channel, "/grpc.health.v1.Health/Check", &bytes).ok()) return -1;
  if (bytes.size() == 2 && bytes[0] == 0x08) return bytes[1];
  return bytes.empty() ? 0 : -1;
}

int HealthStatus(const WorkerProcess& w) { return HealthStatus(Dial(w)); }

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

::testing::AssertionResult ExitsCleanlyOnSigterm(WorkerProcess& w) {
  w.Signal(SIGTERM);
  absl::StatusOr<int> code = w.Wait(absl::Seconds(20));
  if (code.ok() && *code == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure()
         << w.name() << " did not exit 0 on SIGTERM: "
         << (code.ok() ? absl::StrCat("exit ", *code) : code.status().ToString()) << "\n"
         << w.Tail();
}

v1::DecodeSubmit LongRequest(const std::string& id, int max_tokens) {
  v1::DecodeSubmit s;
  s.set_request_id(id);
  auto ids = Reference::Get().tokenizer().Encode("Once upon a time", true, false);
  for (int32_t t : *ids) s.add_prompt_ids(t);
  s.set_max_tokens(max_tokens);
  s.mutable_sampling()->set_ignore_eos(true);
  return s;
}

void WorkerE2eTest::SetUpTestSuite() {
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

void WorkerE2eTest::TearDownTestSuite() {
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
                    << (code.ok() ? absl::StrCat("exit ", *code) : code.status().ToString()) << "\n"
                    << w->Tail();
    }
  }
  pairs_.clear();
  colocated_.reset();
}

void WorkerE2eTest::CheckDisaggregated(const std::string& tls) {
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

}  // namespace tandem::integration
