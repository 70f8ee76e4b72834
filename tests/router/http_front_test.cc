// The OpenAI HTTP front against hostile and heavy clients, in process
// (RouterHarness, FakeWorkers) over raw sockets on 127.0.0.1:
//   - a 100 MB chunked upload is refused 413 after about limits.max_body_bytes,
//     and a Content-Length over the limit right after the header;
//   - 200 slow-header connections (one header line every 2 s) held open
//     while /health and a completion still answer within 1 s;
//   - 500 concurrent streams all end with [DONE], none reset;
//   - a stream whose reader stops reading is cancelled on the worker;
//   - a prompt over limits.max_prompt_bytes is refused on both fronts;
//   - past limits.max_connections a connection gets 503; unfinished headers
//     time out (limits.header_timeout);
//   - a wrong method is 405 naming the allowed one;
//   - a generation is prepared (Router::Prepare + Start) on the prepare
//     executor, never on the dispatching (I/O) thread, and a full prepare
//     queue is 429 with Retry-After at once.
// Each test is bounded (well under 30 s) and stops by itself.

#include <sys/resource.h>

#include <algorithm>
#include <atomic>
#include <deque>
#include <functional>
#include <thread>
#include <vector>

#include "absl/cleanup/cleanup.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/synchronization/mutex.h"
#include "absl/synchronization/notification.h"
#include "common/base/executor.h"
#include "router/internal/http_handlers.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tests/router/raw_http.h"
#include "tests/router/router_harness.h"
#include "tests/testing/eventually.h"
#include "tests/testing/fake_worker.h"
#include "tests/testing/sse.h"

namespace tandem::router {
namespace {

namespace v1 = ::tandem::v1;
using json = nlohmann::json;
using testing::FakeWorker;
using testing::ParseRawResponse;
using testing::RawConn;
using testing::RawResponse;
using testing::RouterHarness;
using ::tandem::testing::Eventually;
using ::testing::HasSubstr;

std::unique_ptr<FakeWorker> Colocated(std::vector<int32_t> script, absl::Duration delay) {
  FakeWorker::Options o;
  o.role = v1::WORKER_ROLE_COLOCATED;
  o.free_blocks = 100000;
  o.context_length = 4096;
  o.total_blocks = 100000;
  std::unique_ptr<FakeWorker> w = FakeWorker::Start(o);
  EXPECT_NE(w, nullptr);
  w->SetScript(std::move(script));
  w->SetTokenDelay(delay);
  return w;
}

std::unique_ptr<RouterHarness> Router(const std::vector<std::string>& workers,
                                      const std::function<void(RouterConfig&)>& tweak = nullptr) {
  RouterConfig c;
  c.discovery.static_workers = workers;
  c.discovery.backoff_initial = absl::Milliseconds(20);
  c.discovery.backoff_max = absl::Milliseconds(200);
  if (tweak) {
    tweak(c);
  }
  return std::make_unique<RouterHarness>(c);
}

std::string Post(const std::string& path, const std::string& body) {
  return absl::StrCat("POST ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n",
                      "Content-Type: application/json\r\nContent-Length: ", body.size(),
                      "\r\n\r\n", body);
}

std::string Get(const std::string& path) {
  return absl::StrCat("GET ", path, " HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n");
}

// One request on a fresh connection; the response (bounded wait).
RawResponse Exchange(int port, const std::string& request,
                     absl::Duration timeout = absl::Seconds(10)) {
  std::unique_ptr<RawConn> c = RawConn::Start(port);
  if (c == nullptr || !c->Send(request, timeout)) {
    return {};
  }
  return c->ReadResponse(timeout);
}

void ExpectOpenAiError(const RawResponse& r, int status, const std::string& message_part) {
  EXPECT_EQ(r.status, status) << r.head;
  json e = json::parse(r.body, nullptr, false);
  ASSERT_TRUE(e.is_object() && e.contains("error")) << r.body;
  EXPECT_THAT(e["error"]["message"].get<std::string>(), HasSubstr(message_part));
}

TEST(HttpFrontTest, ChunkedUploadOverTheLimitIs413BeforeItIsRead) {
  auto h = Router({});
  constexpr int64_t kTotal = int64_t{100} << 20;
  std::unique_ptr<RawConn> c = RawConn::Start(h->http_port());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Send(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Transfer-Encoding: chunked\r\n\r\n"));
  const std::string payload(64 << 10, 'a');
  const std::string chunk = absl::StrCat(absl::Hex(payload.size()), "\r\n", payload, "\r\n");
  int64_t sent = 0;
  const absl::Time give_up = absl::Now() + absl::Seconds(20);
  // Sends while reading: stops at the answer, a closed socket or 100 MB.
  while (sent < kTotal && absl::Now() < give_up) {
    c->ReadAvailable();
    if (ParseRawResponse(c->received()).complete) {
      break;
    }
    if (!c->Send(chunk, absl::Seconds(2))) {
      break;  // the server closed (after its answer) or stopped reading
    }
    sent += static_cast<int64_t>(payload.size());
  }
  RawResponse r = c->ReadResponse(absl::Seconds(5));
  ExpectOpenAiError(r, 413, "limits.max_body_bytes");
  // What the server took in is the limit plus socket buffers and the
  // lingering drain, far from the 100 MB offered.
  EXPECT_LT(sent, int64_t{40} << 20) << "sent " << sent << " bytes";
  std::printf("[ measured ] chunked upload: the router took %lld of %lld bytes before its 413\n",
              static_cast<long long>(sent), static_cast<long long>(kTotal));
  EXPECT_TRUE(c->ClosedByPeer(absl::Seconds(10)));
  // Still serving.
  RawResponse live = Exchange(h->http_port(), Get("/health/live"));
  EXPECT_EQ(live.status, 200) << live.head;
}

TEST(HttpFrontTest, ContentLengthOverTheLimitIs413WithoutReadingTheBody) {
  auto h = Router({});
  std::unique_ptr<RawConn> c = RawConn::Start(h->http_port());
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Send(absl::StrCat(
      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
      "Content-Length: ",
      int64_t{100} << 20, "\r\n\r\n")));
  // No body byte sent: the answer comes from the header alone.
  RawResponse r = c->ReadResponse(absl::Seconds(10));
  ExpectOpenAiError(r, 413, "8388608 bytes (limits.max_body_bytes)");
  EXPECT_THAT(r.head, HasSubstr("Connection: close"));
}

TEST(HttpFrontTest, SlowHeaderConnectionsDoNotStarveOthers) {
  auto w = Colocated({100, 101, 102}, absl::ZeroDuration());
  auto h = Router({w->address()}, [](RouterConfig& c) {
    c.limits.max_inflight = 4;
    c.limits.header_timeout = absl::Seconds(60);  // hold them for the whole test
  });
  ASSERT_TRUE(h->WaitForLive(1));
  constexpr int kSlow = 200;
  std::vector<std::unique_ptr<RawConn>> slow;
  for (int i = 0; i < kSlow; ++i) {
    slow.push_back(RawConn::Start(h->http_port()));
    ASSERT_NE(slow.back(), nullptr);
    ASSERT_TRUE(slow.back()->Send("POST /v1/completions HTTP/1.1\r\n"));
  }
  std::atomic<bool> stop{false};
  std::thread trickle([&] {
    int line = 0;
    while (!stop.load()) {
      for (auto& c : slow) {
        c->Send(absl::StrCat("X-Slow-", line, ": y\r\n"), absl::Milliseconds(100));
      }
      ++line;
      for (int i = 0; i < 20 && !stop.load(); ++i) {
        absl::SleepFor(absl::Milliseconds(100));  // one line every 2 s
      }
    }
  });
  // Over about 6 s (three header lines each), the front keeps answering.
  for (int round = 0; round < 3; ++round) {
    absl::Time start = absl::Now();
    RawResponse health = Exchange(h->http_port(), Get("/health"),
                                  absl::Seconds(5));
    EXPECT_EQ(health.status, 200) << health.head;
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "round " << round;
    start = absl::Now();
    RawResponse done = Exchange(h->http_port(),
                                Post("/v1/completions", R"({"prompt":"Once","max_tokens":3})"),
                                absl::Seconds(5));
    EXPECT_EQ(done.status, 200) << done.head << done.body;
    EXPECT_LT(absl::Now() - start, absl::Seconds(1)) << "round " << round;
    absl::SleepFor(absl::Seconds(2));
  }
  stop.store(true);
  trickle.join();
  // They were held open all along (not shed to make room).
  int open = 0;
  for (auto& c : slow) {
    open += c->ReadAvailable() ? 1 : 0;
  }
  EXPECT_EQ(open, kSlow);
}

TEST(HttpFrontTest, FiveHundredConcurrentStreamsAllComplete) {
  constexpr int kStreams = 500;
  rlimit nofile{};
  ASSERT_EQ(getrlimit(RLIMIT_NOFILE, &nofile), 0);
  if (nofile.rlim_cur < 4096) {
    nofile.rlim_cur = std::min<rlim_t>(nofile.rlim_max, 4096);
    ASSERT_EQ(setrlimit(RLIMIT_NOFILE, &nofile), 0);
  }
  ASSERT_GE(nofile.rlim_cur, 2u * kStreams + 200) << "RLIMIT_NOFILE too low for the test";
  auto w = Colocated(std::vector<int32_t>(8, 100), absl::Milliseconds(5));
  auto h = Router({w->address()}, [](RouterConfig& c) { c.limits.max_inflight = 1000; });
  ASSERT_TRUE(h->WaitForLive(1));
  const std::string request =
      Post("/v1/completions", R"({"prompt":"Once","stream":true,"max_tokens":8})");
  const absl::Time start = absl::Now();
  std::vector<std::unique_ptr<RawConn>> conns;
  std::vector<bool> sent(kStreams, false);
  std::vector<absl::Duration> took(kStreams, absl::InfiniteDuration());
  for (int i = 0; i < kStreams; ++i) {
    conns.push_back(RawConn::Start(h->http_port()));
    ASSERT_NE(conns.back(), nullptr);
  }
  int done = 0;
  int failed = 0;
  const absl::Time give_up = start + absl::Seconds(25);
  while (done + failed < kStreams && absl::Now() < give_up) {
    std::vector<pollfd> fds;
    std::vector<int> which;
    for (int i = 0; i < kStreams; ++i) {
      if (took[i] != absl::InfiniteDuration() || conns[i] == nullptr) {
        continue;
      }
      fds.push_back({conns[i]->fd(), static_cast<short>(sent[i] ? POLLIN : POLLOUT), 0});
      which.push_back(i);
    }
    ::poll(fds.data(), fds.size(), 100);
    for (size_t k = 0; k < fds.size(); ++k) {
      const int i = which[k];
      if (fds[k].revents == 0) {
        continue;
      }
      if (!sent[i]) {
        sent[i] = conns[i]->Send(request);
        if (!sent[i]) {
          ADD_FAILURE() << "stream " << i << ": send failed, errno " << conns[i]->error();
          conns[i] = nullptr;
          ++failed;
        }
        continue;
      }
      const bool open = conns[i]->ReadAvailable();
      RawResponse r = ParseRawResponse(conns[i]->received());
      if (r.complete) {
        EXPECT_EQ(r.status, 200) << r.head;
        EXPECT_THAT(r.body, HasSubstr("data: [DONE]")) << "stream " << i;
        took[i] = absl::Now() - start;
        ++done;
      } else if (!open) {
        ADD_FAILURE() << "stream " << i << " ended early, errno " << conns[i]->error() << ": "
                      << conns[i]->received().substr(0, 300);
        conns[i] = nullptr;
        ++failed;
      }
    }
  }
  EXPECT_EQ(done, kStreams) << failed << " failed";
  std::vector<absl::Duration> ok;
  for (absl::Duration d : took) {
    if (d != absl::InfiniteDuration()) {
      ok.push_back(d);
    }
  }
  if (!ok.empty()) {
    std::sort(ok.begin(), ok.end());
    std::printf("[ measured ] %d/%d streams completed with [DONE]; completion since start: "
                "p50 %s, p99 %s, max %s\n",
                static_cast<int>(ok.size()), kStreams,
                absl::FormatDuration(ok[ok.size() / 2]).c_str(),
                absl::FormatDuration(ok[ok.size() * 99 / 100]).c_str(),
                absl::FormatDuration(ok.back()).c_str());
  }
  EXPECT_TRUE(Eventually([&] { return h->router().inflight() == 0; }, "every request to end"));
}

TEST(HttpFrontTest, ReaderThatStopsReadingIsCancelled) {
  // 8 choices x 2000 tokens with logprobs: megabytes of SSE, far more than
  // the 4 KiB allowed here plus what a small receive window lets through.
  // A token a millisecond keeps each choice's worker stream going for 2 s,
  // long after the router must have cancelled it: with no delay the fake
  // worker could write a whole choice (~60 KB) into gRPC's flow-control
  // window before the router's cancel, end the stream normally and never see
  // it (1 run in 30 with two CPU hogs beside it).
  auto w = Colocated(std::vector<int32_t>(2000, 100), absl::Milliseconds(1));
  auto h = Router({w->address()}, [](RouterConfig& c) { c.limits.max_stream_buffer_bytes = 4096; });
  ASSERT_TRUE(h->WaitForLive(1));
  std::unique_ptr<RawConn> c = RawConn::Start(h->http_port(), /*receive_buffer=*/4096);
  ASSERT_NE(c, nullptr);
  ASSERT_TRUE(c->Send(Post(
      "/v1/completions",
      R"({"prompt":"Once","stream":true,"max_tokens":2000,"n":8,"logprobs":5})")));
  // Never reads: the router must neither block nor buffer without bound.
  EXPECT_TRUE(Eventually([&] { return w->cancelled() >= 1; }, "the worker to see a cancel",
                         absl::Seconds(20)));
  EXPECT_TRUE(Eventually([&] { return h->router().inflight() == 0; }, "the request to end"));
}

TEST(HttpFrontTest, PromptOverMaxPromptBytesIsRefusedOnBothFronts) {
  auto h = Router({}, [](RouterConfig& c) { c.limits.max_prompt_bytes = 1000; });
  RawResponse text = Exchange(
      h->http_port(), Post("/v1/completions", json{{"prompt", std::string(1001, 'a')}}.dump()));
  ExpectOpenAiError(text, 400, "the prompt is 1001 bytes");
  ExpectOpenAiError(text, 400, "at most 1000 bytes of prompt text (limits.max_prompt_bytes)");
  EXPECT_EQ(json::parse(text.body)["error"]["param"], "prompt");
  RawResponse chat = Exchange(
      h->http_port(),
      Post("/v1/chat/completions",
           json{{"messages", {{{"role", "user"}, {"content", std::string(997, 'a')}}}}}.dump()));
  ExpectOpenAiError(chat, 400, "the messages are 1001 bytes");
  EXPECT_EQ(json::parse(chat.body)["error"]["param"], "messages");
  // Tools are written into the prompt: they count. 5 message bytes + the
  // tool as the template writes it (66 bytes around the description).
  json tool = {{"type", "function"},
               {"function", {{"name", "f"}, {"description", std::string(930, 'a')}}}};
  RawResponse tools = Exchange(
      h->http_port(),
      Post("/v1/chat/completions",
           json{{"messages", {{{"role", "user"}, {"content", "a"}}}}, {"tools", {tool}}}.dump()));
  ExpectOpenAiError(tools, 400, "the messages are 1001 bytes");
  // gRPC goes through the same Router::Prepare.
  v1::GenerateRequest req;
  req.set_text(std::string(1001, 'a'));
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(10)));
  auto reader = h->stub().Generate(&ctx, req);
  v1::GenerateResponse m;
  while (reader->Read(&m)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT);
  EXPECT_THAT(s.error_message(), HasSubstr("limits.max_prompt_bytes"));
  // At the limit the prompt is tokenized and goes on (no worker: 503).
  RawResponse fits = Exchange(
      h->http_port(), Post("/v1/completions", json{{"prompt", std::string(1000, 'a')}}.dump()));
  EXPECT_EQ(fits.status, 503) << fits.body;
}

TEST(HttpFrontTest, ConnectionsOverTheLimitGet503AndSlowHeadersTimeOut) {
  auto h = Router({}, [](RouterConfig& c) {
    c.limits.max_connections = 3;
    c.limits.header_timeout = absl::Seconds(1);
  });
  std::vector<std::unique_ptr<RawConn>> held;
  for (int i = 0; i < 3; ++i) {
    held.push_back(RawConn::Start(h->http_port()));
    ASSERT_NE(held.back(), nullptr);
    ASSERT_TRUE(held.back()->Send("GET /health/live HTTP/1.1\r\n"));  // never finished
  }
  RawResponse busy = Exchange(h->http_port(), Get("/health/live"));
  ExpectOpenAiError(busy, 503, "limits.max_connections");
  EXPECT_THAT(busy.head, HasSubstr("Retry-After: 1"));
  // The unfinished headers time out (limits.header_timeout) and free their slots.
  for (auto& c : held) {
    EXPECT_TRUE(c->ClosedByPeer(absl::Seconds(10)));
  }
  held.clear();
  EXPECT_TRUE(Eventually(
      [&] {
        return Exchange(h->http_port(), Get("/health/live"))
                   .status == 200;
      },
      "a connection slot to free up", absl::Seconds(10), absl::Milliseconds(50)));
}

TEST(HttpFrontTest, ClientThatLeavesDuringANonStreamingRequestCancelsIt) {
  auto w = Colocated(std::vector<int32_t>(300, 100), absl::Milliseconds(10));
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  {
    std::unique_ptr<RawConn> c = RawConn::Start(h->http_port());
    ASSERT_NE(c, nullptr);
    ASSERT_TRUE(c->Send(Post("/v1/completions", R"({"prompt":"Once","max_tokens":300})")));
    ASSERT_TRUE(Eventually([&] { return w->requests() == 1; }, "the request to reach the worker"));
  }  // hangs up; nothing was written to it that could fail
  EXPECT_TRUE(Eventually([&] { return w->cancelled() == 1; }, "the worker to see the cancel",
                         absl::Seconds(10)));
  EXPECT_TRUE(Eventually([&] { return h->router().inflight() == 0; }, "the request to end"));
}

// A ResponseSink that records what the exchange wrote (one thread: the
// test's, standing in for the connection's strand).
struct RecordingSink : internal::ResponseSink {
  void Respond(internal::HttpResponse r) override { responses.push_back(std::move(r)); }
  void StartStream(internal::HttpResponse head) override { responses.push_back(std::move(head)); }
  void WriteChunk(std::string data) override { chunks += data; }
  void EndStream() override { ended = true; }
  std::vector<internal::HttpResponse> responses;
  std::string chunks;
  bool ended = false;
};

// Before, the HTTP front ran Router::Prepare and Router::Start (tokenizing,
// complexity routing's and the semantic cache's embeddings) inside Dispatch,
// on the Beast I/O thread, which stalled every connection of that thread
// behind the embedder. Now Dispatch only parses and queues: with the prepare
// executor's one thread held, a request gets no answer and no post, a second
// one finds the queue (1) full and gets 429 with Retry-After at once; once
// released, the preparation's outcome and the events arrive as posts to the
// strand (here: this thread), an unknown model's error as well.
TEST(HttpFrontTest, GenerationsArePreparedOnTheExecutorNotTheIoThread) {
  auto w = Colocated({5, 6, 7}, absl::ZeroDuration());
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  absl::Mutex mu;
  std::deque<std::function<void()>> posted;
  const internal::PostFn post = [&](std::function<void()> fn) {
    absl::MutexLock lock(&mu);
    posted.push_back(std::move(fn));
  };
  auto run_posted = [&] {
    for (;;) {
      std::function<void()> fn;
      {
        absl::MutexLock lock(&mu);
        if (posted.empty()) {
          return;
        }
        fn = std::move(posted.front());
        posted.pop_front();
      }
      fn();
    }
  };
  // Runs the posts on this thread until `done` holds (bounded).
  auto drain_until = [&](const std::function<bool()>& done, absl::string_view what) {
    return Eventually(
        [&] {
          run_posted();
          return done();
        },
        what);
  };
  const ApiKeys no_keys;
  internal::HttpContext ctx(h->router(), h->metrics(), no_keys, nullptr);
  base::Executor prepare(1, 1);  // after ctx: joined before ctx goes
  ctx.prepare = &prepare;
  absl::Notification release;
  absl::Notification held;
  // Whatever fails below, the executor's thread is let go (else ~Executor waits).
  absl::Cleanup let_go = [&] {
    if (!release.HasBeenNotified()) {
      release.Notify();
    }
  };
  ASSERT_TRUE(prepare.Post([&] {
    held.Notify();
    release.WaitForNotification();
  }));
  held.WaitForNotification();  // out of the queue: the queue's one place is free

  internal::HttpRequest req;
  req.method = "POST";
  req.path = "/v1/completions";
  req.body = R"({"prompt":"Once","max_tokens":3,"temperature":0})";
  RecordingSink sink;
  std::shared_ptr<internal::GenerationExchange> x = internal::Dispatch(ctx, req, sink, post);
  ASSERT_NE(x, nullptr);
  EXPECT_TRUE(sink.responses.empty()) << "answered on the dispatching thread";

  RecordingSink refused;
  EXPECT_EQ(internal::Dispatch(ctx, req, refused, post), nullptr);
  ASSERT_EQ(refused.responses.size(), 1u);
  EXPECT_EQ(refused.responses[0].status, 429) << refused.responses[0].body;
  EXPECT_THAT(refused.responses[0].body, HasSubstr("waiting to be prepared"));
  bool retry_after = false;
  for (const auto& [k, v] : refused.responses[0].headers) {
    retry_after = retry_after || k == "Retry-After";
  }
  EXPECT_TRUE(retry_after);

  internal::HttpRequest unknown = req;
  unknown.body = R"({"model":"no-such-model","prompt":"Once","max_tokens":3})";
  RecordingSink not_found;
  absl::SleepFor(absl::Milliseconds(20));
  {
    absl::MutexLock lock(&mu);
    EXPECT_TRUE(posted.empty()) << "the preparation ran while its executor was held";
  }
  EXPECT_TRUE(sink.responses.empty());
  release.Notify();
  ASSERT_TRUE(drain_until([&] { return x->done(); }, "the completion, through the posts"));
  ASSERT_EQ(sink.responses.size(), 1u);
  EXPECT_EQ(sink.responses[0].status, 200) << sink.responses[0].body;
  json body = json::parse(sink.responses[0].body, nullptr, false);
  ASSERT_TRUE(body.is_object()) << sink.responses[0].body;
  EXPECT_EQ(body["usage"]["completion_tokens"], 3) << sink.responses[0].body;

  // Queue is free again: a preparation error comes back the same way.
  std::shared_ptr<internal::GenerationExchange> y = internal::Dispatch(ctx, unknown, not_found, post);
  ASSERT_NE(y, nullptr);
  ASSERT_TRUE(drain_until([&] { return y->done(); }, "the unknown model's error, through the posts"));
  ASSERT_EQ(not_found.responses.size(), 1u);
  EXPECT_EQ(not_found.responses[0].status, 400) << not_found.responses[0].body;
  EXPECT_THAT(not_found.responses[0].body, HasSubstr("model_not_found"));
  EXPECT_TRUE(drain_until([&] { return ctx.unfinished_requests.load() == 0; }, "every post made"));
}

TEST(HttpFrontTest, KeepAliveAndPipelinedRequestsAreAllAnswered) {
  auto w = Colocated({100, 101, 102}, absl::Milliseconds(20));
  auto h = Router({w->address()});
  ASSERT_TRUE(h->WaitForLive(1));
  std::unique_ptr<RawConn> c = RawConn::Start(h->http_port());
  ASSERT_NE(c, nullptr);
  const std::string one = Post("/v1/completions", R"({"prompt":"Once","max_tokens":3})");
  const std::string stream =
      Post("/v1/completions", R"({"prompt":"Once","max_tokens":3,"stream":true})");
  // Keep-alive: one after the other on the same connection.
  for (const std::string* req : {&one, &stream, &one}) {
    ASSERT_TRUE(c->Send(*req));
    RawResponse r = c->ReadResponse();
    EXPECT_EQ(r.status, 200) << r.head << r.body;
    EXPECT_TRUE(r.complete);
  }
  // Pipelined: the next requests arrive while the first one generates.
  ASSERT_TRUE(c->Send(absl::StrCat(stream, one, stream)));
  for (int i = 0; i < 3; ++i) {
    RawResponse r = c->ReadResponse();
    EXPECT_EQ(r.status, 200) << i << ": " << r.head << r.body;
    EXPECT_TRUE(r.complete) << i;
    if (i != 1) {
      EXPECT_THAT(tandem::testing::SseData(r.body), ::testing::Contains("[DONE]")) << i;
    }
  }
}

TEST(HttpFrontTest, WrongMethodIs405NamingTheAllowedOne) {
  auto h = Router({});
  RawResponse r = Exchange(h->http_port(), Get("/v1/completions"));
  ExpectOpenAiError(r, 405, "use POST");
  EXPECT_THAT(r.head, HasSubstr("Allow: POST"));
  RawResponse bad = Exchange(h->http_port(), "NOT HTTP AT ALL\r\n\r\n");
  EXPECT_EQ(bad.status, 400) << bad.head;
}

}  // namespace
}  // namespace tandem::router
