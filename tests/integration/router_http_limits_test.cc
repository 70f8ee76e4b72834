// The real tandem-router as a child process, fed a 32 MB prompt (with
// limits.max_body_bytes raised to 64 MiB so the body itself is accepted):
// both fronts refuse it 400 / INVALID_ARGUMENT naming limits.max_prompt_bytes
// before tokenizing it, and the router's resident memory (VmRSS) returns near
// its baseline afterwards. No worker is needed: the prompt is refused first.

#include <fstream>
#include <memory>
#include <string>

#include <grpcpp/grpcpp.h>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "tandem/v1/generation.grpc.pb.h"
#include "tests/router/raw_http.h"
#include "tests/testing/child_process.h"
#include "tests/testing/eventually.h"
#include "tests/testing/test_paths.h"

namespace tandem::router {
namespace {

using json = nlohmann::json;
using ::tandem::testing::ChildOptions;
using ::tandem::testing::ChildProcess;
using ::tandem::testing::Eventually;
using ::tandem::testing::RssBytes;
using testing::RawConn;
using testing::RawResponse;
using ::testing::HasSubstr;

RawResponse PostCompletion(int port, const std::string& body) {
  std::unique_ptr<RawConn> c = RawConn::Start(port);
  if (c == nullptr ||
      !c->Send(absl::StrCat("POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\n"
                            "Content-Type: application/json\r\nContent-Length: ",
                            body.size(), "\r\n\r\n", body),
               absl::Seconds(30))) {
    return {};
  }
  return c->ReadResponse(absl::Seconds(30));
}

TEST(RouterHttpLimitsTest, HugePromptIsRefusedBeforeTokenizingAndMemoryReturns) {
  const std::string dir = ::testing::TempDir();
  const std::string config = absl::StrCat(dir, "/router_http_limits.yaml");
  {
    std::ofstream out(config);
    out << "grpc_address: 127.0.0.1:0\nhttp_address: 127.0.0.1:0\n"
        << "models: [ {name: stories260K, path: "
        << tandem::testing::RequireSharedFile("models/stories260K/stories260K.gguf") << "} ]\n"
        << "limits:\n  max_body_bytes: 67108864\n";
  }
  ChildOptions o;
  o.argv = {TANDEM_ROUTER_BIN, "--config=" + config, "--drain_grace=1s"};
  o.log_dir = dir;
  absl::StatusOr<std::unique_ptr<ChildProcess>> router = ChildProcess::Start(o);
  ASSERT_TRUE(router.ok()) << router.status();
  absl::StatusOr<std::string> ready = (*router)->WaitForLine("READY");
  ASSERT_TRUE(ready.ok()) << ready.status();
  const int http_port = ChildProcess::IntField(*ready, "http_port");
  const int grpc_port = ChildProcess::IntField(*ready, "grpc_port");
  const pid_t pid = (*router)->pid();

  // Warm up (a small request: 503, no workers), then the baseline.
  RawResponse warm = PostCompletion(http_port, R"({"prompt":"Once upon a time"})");
  EXPECT_EQ(warm.status, 503) << warm.head << warm.body;
  const int64_t baseline = RssBytes(pid);
  ASSERT_GT(baseline, 0);

  const std::string prompt(32 << 20, 'a');
  const std::string body = absl::StrCat(R"({"prompt":")", prompt, R"(","max_tokens":4})");
  for (int i = 0; i < 2; ++i) {
    RawResponse r = PostCompletion(http_port, body);
    EXPECT_EQ(r.status, 400) << r.head;
    json e = json::parse(r.body, nullptr, false);
    ASSERT_TRUE(e.is_object() && e.contains("error")) << r.body.substr(0, 500);
    EXPECT_EQ(e["error"]["param"], "prompt");
    EXPECT_THAT(e["error"]["message"].get<std::string>(), HasSubstr("limits.max_prompt_bytes"));
    EXPECT_THAT(e["error"]["message"].get<std::string>(),
                HasSubstr(absl::StrCat("the prompt is ", prompt.size(), " bytes")));
  }
  int64_t after = RssBytes(pid);
  // "Near": within 16 MiB of the baseline. Each request held ~100 MB (body,
  // parsed JSON, the prompt copy); with glibc's default (dynamic) mmap
  // threshold a thread arena kept ~42 MiB of it for good.
  const bool returned = static_cast<bool>(
      Eventually([&] { return (after = RssBytes(pid)) < baseline + (int64_t{16} << 20); },
                 "the router's RSS to return near its baseline", absl::Seconds(10),
                 absl::Milliseconds(100)));
  EXPECT_TRUE(returned) << "baseline " << baseline << " bytes, after " << after;
  std::printf("[ measured ] router VmRSS: baseline %.1f MiB, after two 32 MiB prompts %.1f MiB\n",
              baseline / 1048576.0, after / 1048576.0);

  // The gRPC front checks the same bound (a 3 MiB prompt fits its 4 MiB
  // messages but not the stories260K default of 64 KiB).
  auto stub = tandem::v1::Generation::NewStub(grpc::CreateChannel(
      absl::StrCat("127.0.0.1:", grpc_port), grpc::InsecureChannelCredentials()));
  tandem::v1::GenerateRequest req;
  req.set_text(std::string(3 << 20, 'a'));
  req.set_max_tokens(4);
  grpc::ClientContext ctx;
  ctx.set_deadline(absl::ToChronoTime(absl::Now() + absl::Seconds(30)));
  auto reader = stub->Generate(&ctx, req);
  tandem::v1::GenerateResponse m;
  while (reader->Read(&m)) {
  }
  grpc::Status s = reader->Finish();
  EXPECT_EQ(s.error_code(), grpc::StatusCode::INVALID_ARGUMENT) << s.error_message();
  EXPECT_THAT(s.error_message(), HasSubstr("limits.max_prompt_bytes"));

  // Still serving.
  RawResponse again = PostCompletion(http_port, R"({"prompt":"Once upon a time"})");
  EXPECT_EQ(again.status, 503) << again.head;
}

}  // namespace
}  // namespace tandem::router
