// tandem-replay's clients against in-process fake servers on 127.0.0.1, to
// pin what goes on the wire and how the answer is read:
//  - gRPC: the request (text, max_tokens, ignore_eos, temperature 0, BOS,
//    request id, the API key as metadata); chunks with their token counts,
//    usage, route, finish reason; a server error's code name;
//  - HTTP: the body (stream, stream_options.include_usage, ignore_eos,
//    max_tokens, model) and the Authorization header; SSE events across
//    reads, keep-alive comments, usage with cached tokens; an error event,
//    a missing [DONE] and a 503 are failures with their status.
#include <grpcpp/grpcpp.h>
#include <httplib.h>

#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/synchronization/mutex.h"
#include "absl/time/clock.h"
#include "bench/replay/client.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/generation.grpc.pb.h"

namespace tandem::replay {
namespace {

namespace v1 = ::tandem::v1;
using json = nlohmann::json;
using ::testing::ElementsAre;
using ::testing::HasSubstr;

ReplayRequest Request() {
  ReplayRequest r;
  r.id = 5;
  r.send_at_s = 0.25;
  r.prompt = "Once upon a time";
  r.prompt_tokens = 4;
  r.max_tokens = 3;
  r.kind = "repeat";
  r.source_line = 9;
  return r;
}

// Streams three tokens in two messages (1, then 2), then usage and route.
class FakeGeneration : public v1::Generation::Service {
 public:
  grpc::Status Generate(grpc::ServerContext* ctx, const v1::GenerateRequest* req,
                        grpc::ServerWriter<v1::GenerateResponse>* writer) override {
    {
      absl::MutexLock lock(&mu_);
      request_ = *req;
      const auto it = ctx->client_metadata().find("authorization");
      authorization_ = it == ctx->client_metadata().end()
                           ? ""
                           : std::string(it->second.data(), it->second.size());
    }
    if (req->model() == "broken") {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED, "queue full");
    }
    v1::GenerateResponse m;
    m.add_tokens()->set_token(10);
    m.set_text(" there");
    m.mutable_route()->set_model("m");
    writer->Write(m);
    m.Clear();
    m.add_tokens()->set_token(11);
    m.add_tokens()->set_token(12);
    m.set_text(" was a");
    writer->Write(m);
    m.Clear();
    m.set_finish_reason(v1::FINISH_REASON_LENGTH);
    m.mutable_usage()->set_prompt_tokens(5);
    m.mutable_usage()->set_completion_tokens(3);
    m.mutable_usage()->set_cached_prompt_tokens(2);
    m.mutable_route()->set_model("m");
    m.mutable_route()->set_decode_worker("d0");
    m.mutable_route()->set_colocated(true);
    m.mutable_route()->set_cache_hit(false);
    writer->Write(m);
    return grpc::Status::OK;
  }

  v1::GenerateRequest request() {
    absl::MutexLock lock(&mu_);
    return request_;
  }
  std::string authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }

 private:
  absl::Mutex mu_;
  v1::GenerateRequest request_ ABSL_GUARDED_BY(mu_);
  std::string authorization_ ABSL_GUARDED_BY(mu_);
};

class GrpcClientTest : public ::testing::Test {
 protected:
  void SetUp() override {
    grpc::ServerBuilder b;
    b.AddListeningPort("127.0.0.1:0", grpc::InsecureServerCredentials(), &port_);
    b.RegisterService(&service_);
    server_ = b.BuildAndStart();
    ASSERT_NE(server_, nullptr);
  }
  void TearDown() override { server_->Shutdown(); }

  RequestRecord Send(const std::string& model, const std::string& key, double temperature = 0) {
    absl::StatusOr<std::unique_ptr<Client>> c = MakeClient(
        {Protocol::kGrpc, absl::StrCat("127.0.0.1:", port_), model, key, temperature});
    EXPECT_TRUE(c.ok()) << c.status();
    Cancellation cancel;
    return (*c)->Send(Request(), absl::Now(), cancel);
  }

  FakeGeneration service_;
  std::unique_ptr<grpc::Server> server_;
  int port_ = 0;
};

TEST_F(GrpcClientTest, SendsTheWorkloadAndReadsTheStream) {
  const RequestRecord r = Send("m", "sk-test");
  const v1::GenerateRequest req = service_.request();
  EXPECT_EQ(req.model(), "m");
  EXPECT_EQ(req.text(), "Once upon a time");
  EXPECT_EQ(req.max_tokens(), 3);
  EXPECT_TRUE(req.sampling().ignore_eos());
  EXPECT_EQ(req.sampling().temperature(), 0);
  EXPECT_TRUE(req.add_special_tokens());
  EXPECT_EQ(req.request_id(), "replay-5");
  EXPECT_EQ(service_.authorization(), "Bearer sk-test");
  Send("m", "", /*temperature=*/0.7);  // --temperature reaches the request
  EXPECT_FLOAT_EQ(service_.request().sampling().temperature(), 0.7f);

  EXPECT_TRUE(r.ok);
  EXPECT_EQ(r.status, "OK");
  EXPECT_EQ(r.id, 5);
  EXPECT_EQ(r.kind, "repeat");
  EXPECT_EQ(r.source_line, 9);
  EXPECT_EQ(r.protocol, "grpc");
  EXPECT_THAT(r.chunk_tokens, ElementsAre(1, 2));
  ASSERT_EQ(r.chunk_times_s.size(), 2u);
  EXPECT_EQ(*r.first_token_s, r.chunk_times_s[0]);
  EXPECT_LE(r.send_s, *r.first_token_s);
  EXPECT_LE(r.chunk_times_s[1], r.end_s);
  EXPECT_EQ(r.prompt_tokens, 5);
  EXPECT_TRUE(r.prompt_tokens_from_server);
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_EQ(r.cached_prompt_tokens, 2);
  EXPECT_EQ(r.cache_hit, false);
  EXPECT_EQ(r.route_model, "m");
  EXPECT_EQ(r.decode_worker, "d0");
  EXPECT_EQ(r.colocated, true);
  EXPECT_EQ(r.finish_reason, "length");
}

TEST_F(GrpcClientTest, NoKeyNoMetadataAndErrorsByCodeName) {
  const RequestRecord r = Send("broken", "");
  EXPECT_EQ(service_.authorization(), "");
  EXPECT_FALSE(r.ok);
  EXPECT_EQ(r.status, "RESOURCE_EXHAUSTED");
  EXPECT_EQ(r.error, "queue full");
  EXPECT_EQ(r.prompt_tokens, 4);  // ours: the server sent no usage
  EXPECT_FALSE(r.prompt_tokens_from_server);
}

// The OpenAI front's stream as the router writes it; `mode` picks a variant.
class FakeOpenAi {
 public:
  FakeOpenAi() {
    server_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
      json body = json::parse(req.body);
      {
        absl::MutexLock lock(&mu_);
        body_ = body;
        authorization_ = req.get_header_value("Authorization");
      }
      const std::string mode = body.value("model", "");
      if (mode == "busy") {
        res.status = 503;
        res.set_content(R"({"error":{"message":"overloaded","code":"unavailable"}})",
                        "application/json");
        return;
      }
      std::vector<std::string> events = {
          R"({"model":"m","choices":[{"index":0,"text":" there","finish_reason":null}],"usage":null})",
          R"({"model":"m","choices":[{"index":0,"text":" was a","finish_reason":null}],"usage":null})",
          R"({"model":"m","choices":[{"index":0,"text":"","finish_reason":"length"}],"usage":null})",
          R"({"model":"m","choices":[],"usage":{"prompt_tokens":5,"completion_tokens":3,"prompt_tokens_details":{"cached_tokens":2}}})"};
      if (mode == "error") {
        events.push_back(R"({"error":{"message":"worker lost","code":"unavailable"}})");
      }
      std::string stream = ": keep-alive\n\n";
      for (const std::string& e : events) {
        stream += "data: " + e + "\n\n";
      }
      if (mode != "truncated") {
        stream += "data: [DONE]\n\n";
      }
      res.set_chunked_content_provider(
          "text/event-stream", [stream](size_t, httplib::DataSink& sink) {
            // Odd-sized pieces: events arrive split across reads.
            for (size_t i = 0; i < stream.size(); i += 7) {
              sink.write(stream.data() + i, std::min<size_t>(7, stream.size() - i));
            }
            sink.done();
            return true;
          });
    });
    port_ = server_.bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_.listen_after_bind(); });
    while (!server_.is_running()) {
      absl::SleepFor(absl::Milliseconds(1));
    }
  }
  ~FakeOpenAi() {
    server_.stop();
    thread_.join();
  }

  RequestRecord Send(const std::string& model, const std::string& key, double temperature = 0) {
    absl::StatusOr<std::unique_ptr<Client>> c = MakeClient(
        {Protocol::kHttp, absl::StrCat("127.0.0.1:", port_), model, key, temperature});
    EXPECT_TRUE(c.ok()) << c.status();
    Cancellation cancel;
    return (*c)->Send(Request(), absl::Now(), cancel);
  }
  json body() {
    absl::MutexLock lock(&mu_);
    return body_;
  }
  std::string authorization() {
    absl::MutexLock lock(&mu_);
    return authorization_;
  }

 private:
  httplib::Server server_;
  int port_ = 0;
  std::thread thread_;
  absl::Mutex mu_;
  json body_ ABSL_GUARDED_BY(mu_);
  std::string authorization_ ABSL_GUARDED_BY(mu_);
};

TEST(HttpClientTest, SendsTheWorkloadAndReadsTheEvents) {
  FakeOpenAi server;
  const RequestRecord r = server.Send("m", "sk-test");
  const json body = server.body();
  EXPECT_EQ(body["model"], "m");
  EXPECT_EQ(body["prompt"], "Once upon a time");
  EXPECT_EQ(body["max_tokens"], 3);
  EXPECT_EQ(body["ignore_eos"], true);
  EXPECT_EQ(body["temperature"], 0);
  EXPECT_EQ(body["stream"], true);
  EXPECT_EQ(body["stream_options"]["include_usage"], true);
  EXPECT_EQ(server.authorization(), "Bearer sk-test");
  server.Send("m", "", /*temperature=*/0.7);  // --temperature reaches the body
  EXPECT_EQ(server.body()["temperature"], 0.7);

  EXPECT_TRUE(r.ok) << r.status << " " << r.error;
  EXPECT_EQ(r.status, "200");
  EXPECT_EQ(r.protocol, "http");
  EXPECT_EQ(r.chunk_times_s.size(), 2u);  // the events with text
  EXPECT_TRUE(r.chunk_tokens.empty());    // unknown on HTTP
  EXPECT_EQ(r.prompt_tokens, 5);
  EXPECT_TRUE(r.prompt_tokens_from_server);
  EXPECT_EQ(r.output_tokens, 3);
  EXPECT_EQ(r.cached_prompt_tokens, 2);
  EXPECT_FALSE(r.cache_hit.has_value());
  EXPECT_EQ(r.route_model, "m");
  EXPECT_EQ(r.finish_reason, "length");
}

TEST(HttpClientTest, FailuresKeepTheirStatusAndMessage) {
  FakeOpenAi server;
  const RequestRecord error = server.Send("error", "");
  EXPECT_EQ(server.authorization(), "");
  EXPECT_FALSE(error.ok);
  EXPECT_EQ(error.status, "STREAM_ERROR");
  EXPECT_THAT(error.error, HasSubstr("worker lost"));
  const RequestRecord truncated = server.Send("truncated", "");
  EXPECT_FALSE(truncated.ok);
  EXPECT_EQ(truncated.status, "STREAM_ERROR");
  EXPECT_THAT(truncated.error, HasSubstr("without [DONE]"));
  const RequestRecord busy = server.Send("busy", "");
  EXPECT_FALSE(busy.ok);
  EXPECT_EQ(busy.status, "503");
  EXPECT_THAT(busy.error, HasSubstr("overloaded"));
}

}  // namespace
}  // namespace tandem::replay
