// OpenAI wire format: SSE framing, stream chunks (chat role chunk, deltas,
// finish chunk, include_usage chunk) and non-streaming responses.

#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/openai_request.h"
#include "router/openai_response.h"
#include "tests/testing/router_test_util.h"

namespace tandem::router {
namespace {

using json = nlohmann::json;
using ::testing::HasSubstr;

TEST(SseTest, Framing) {
  EXPECT_EQ(SseEvent(R"({"a":1})"), "data: {\"a\":1}\n\n");
  // Multi-line data becomes one data: line per line, one event.
  EXPECT_EQ(SseEvent("a\nb"), "data: a\ndata: b\n\n");
  EXPECT_EQ(SseEvent("a\r\nb"), "data: a\ndata: b\n\n");
  EXPECT_EQ(SseDone(), "data: [DONE]\n\n");
  EXPECT_EQ(SseKeepAlive().rfind(":", 0), 0u);  // a comment line
  EXPECT_EQ(SseKeepAlive().substr(SseKeepAlive().size() - 2), "\n\n");
}

class BuilderTest : public ::testing::Test {
 protected:
  BuilderTest() : catalog_(testing::StoriesCatalog()) {}
  const ServedModel& model() { return *catalog_.models()[0]; }

  OpenAiRequest Parse(OpenAiEndpoint ep, const std::string& body) {
    absl::StatusOr<OpenAiRequest> r = ParseOpenAiRequest(ep, body);
    EXPECT_TRUE(r.ok()) << r.status();
    return *r;
  }

  static ChoiceDelta Delta(int index, std::string text, std::vector<int32_t> ids = {}) {
    ChoiceDelta d;
    d.index = index;
    d.text = std::move(text);
    for (int32_t id : ids) {
      TokenOutput t;
      t.id = id;
      t.logprob = -0.5f;
      t.top_logprobs = {{id, -0.5f}, {id + 1, -1.5f}};
      d.tokens.push_back(t);
    }
    return d;
  }

  static RequestSummary Summary(int prompt, int completion) {
    RequestSummary s;
    s.prompt_tokens = prompt;
    s.completion_tokens = completion;
    s.cached_prompt_tokens = 2;
    return s;
  }

  ModelCatalog catalog_;
};

TEST_F(BuilderTest, ChatStreamChunks) {
  OpenAiRequest req = Parse(OpenAiEndpoint::kChat,
                            R"({"messages":[{"role":"user","content":"Hi"}],"stream":true,)"
                            R"("stream_options":{"include_usage":true}})");
  OpenAiResponseBuilder b(req, model(), "chatcmpl-1", 1700000000);
  std::vector<std::string> first = b.OnDelta(Delta(0, "Hel"));
  ASSERT_EQ(first.size(), 2u);  // the role chunk, then the content
  json role = json::parse(first[0]);
  EXPECT_EQ(role["object"], "chat.completion.chunk");
  EXPECT_EQ(role["id"], "chatcmpl-1");
  EXPECT_EQ(role["model"], "stories260K");
  EXPECT_EQ(role["choices"][0]["delta"]["role"], "assistant");
  EXPECT_TRUE(role["choices"][0]["finish_reason"].is_null());
  EXPECT_TRUE(role.contains("usage") && role["usage"].is_null());  // include_usage: null
  json content = json::parse(first[1]);
  EXPECT_EQ(content["choices"][0]["delta"]["content"], "Hel");
  EXPECT_FALSE(content["choices"][0]["delta"].contains("role"));
  // Nothing visible (held bytes): no chunk.
  EXPECT_TRUE(b.OnDelta(Delta(0, "")).empty());
  ASSERT_EQ(b.OnDelta(Delta(0, "lo")).size(), 1u);
  json fin = json::parse(b.OnChoiceDone({0, FinishReason::kLength, 3}));
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "length");
  EXPECT_TRUE(fin["choices"][0]["delta"].empty());
  json usage = json::parse(b.UsageChunk(Summary(5, 3)));
  EXPECT_TRUE(usage["choices"].empty());
  EXPECT_EQ(usage["usage"]["prompt_tokens"], 5);
  EXPECT_EQ(usage["usage"]["completion_tokens"], 3);
  EXPECT_EQ(usage["usage"]["total_tokens"], 8);
  EXPECT_EQ(usage["usage"]["prompt_tokens_details"]["cached_tokens"], 2);
}

TEST_F(BuilderTest, NoUsageFieldWithoutIncludeUsage) {
  OpenAiRequest req = Parse(OpenAiEndpoint::kCompletions, R"({"prompt":"Hi","stream":true})");
  OpenAiResponseBuilder b(req, model(), "cmpl-1", 1);
  std::vector<std::string> chunks = b.OnDelta(Delta(0, "x"));
  ASSERT_EQ(chunks.size(), 1u);
  json c = json::parse(chunks[0]);
  EXPECT_EQ(c["object"], "text_completion");
  EXPECT_EQ(c["choices"][0]["text"], "x");
  EXPECT_FALSE(c.contains("usage"));
}

TEST_F(BuilderTest, CompletionNonStreamingWithLogprobs) {
  OpenAiRequest req = Parse(OpenAiEndpoint::kCompletions, R"({"prompt":"Hi","logprobs":1,"n":2})");
  OpenAiResponseBuilder b(req, model(), "cmpl-2", 1);
  EXPECT_TRUE(b.OnDelta(Delta(0, "ab", {100, 101})).empty());  // not streaming: no chunks
  b.OnDelta(Delta(1, "z", {102}));
  b.OnChoiceDone({0, FinishReason::kStop, 2});
  b.OnChoiceDone({1, FinishReason::kLength, 1});
  json r = json::parse(b.FinalResponse(Summary(3, 3)));
  EXPECT_EQ(r["object"], "text_completion");
  ASSERT_EQ(r["choices"].size(), 2u);
  EXPECT_EQ(r["choices"][0]["text"], "ab");
  EXPECT_EQ(r["choices"][0]["finish_reason"], "stop");
  EXPECT_EQ(r["choices"][1]["finish_reason"], "length");
  const json& lp = r["choices"][0]["logprobs"];
  ASSERT_EQ(lp["tokens"].size(), 2u);
  EXPECT_EQ(lp["token_logprobs"][0], -0.5);
  EXPECT_EQ(lp["top_logprobs"][0].size(), 2u);
  EXPECT_EQ(lp["text_offset"][0], 0);
  EXPECT_EQ(r["usage"]["total_tokens"], 6);
}

TEST_F(BuilderTest, ChatNonStreamingWithLogprobs) {
  OpenAiRequest req = Parse(OpenAiEndpoint::kChat,
                            R"({"messages":[{"role":"user","content":"Hi"}],"logprobs":true,)"
                            R"("top_logprobs":2})");
  OpenAiResponseBuilder b(req, model(), "chatcmpl-3", 1);
  // A byte token (<0xE2>) whose piece is not valid UTF-8 alone.
  b.OnDelta(Delta(0, "", {3 + 0xE2}));
  b.OnDelta(Delta(0, "ok", {100}));
  b.OnChoiceDone({0, FinishReason::kStop, 2});
  json r = json::parse(b.FinalResponse(Summary(3, 2)));
  EXPECT_EQ(r["object"], "chat.completion");
  EXPECT_EQ(r["choices"][0]["message"]["role"], "assistant");
  EXPECT_EQ(r["choices"][0]["message"]["content"], "ok");
  const json& content = r["choices"][0]["logprobs"]["content"];
  ASSERT_EQ(content.size(), 2u);
  EXPECT_EQ(content[0]["bytes"], json::array({0xE2}));
  EXPECT_EQ(content[0]["token"], "<0xE2>");  // shown by its vocabulary entry
  EXPECT_EQ(content[0]["top_logprobs"].size(), 2u);
}

TEST_F(BuilderTest, ChatFinishWithoutContentStillSendsRole) {
  OpenAiRequest req =
      Parse(OpenAiEndpoint::kChat, R"({"messages":[{"role":"user","content":"Hi"}],"stream":true})");
  OpenAiResponseBuilder b(req, model(), "chatcmpl-4", 1);
  json fin = json::parse(b.OnChoiceDone({0, FinishReason::kStop, 1}));
  EXPECT_EQ(fin["choices"][0]["delta"]["role"], "assistant");
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "stop");
}

constexpr char kToolRequest[] =
    R"({"messages":[{"role":"user","content":"Weather in Paris?"}],)"
    R"("tools":[{"type":"function","function":{"name":"get_weather","parameters":{}}}])";

TEST_F(BuilderTest, ChatToolCallsNonStreaming) {
  OpenAiRequest req = Parse(OpenAiEndpoint::kChat, absl::StrCat(kToolRequest, "}"));
  EXPECT_TRUE(req.parse_tool_calls);  // tool_choice defaults to "auto"
  EXPECT_EQ(req.tool_names, std::vector<std::string>{"get_weather"});
  OpenAiResponseBuilder b(req, model(), "chatcmpl-7", 1);
  b.OnDelta(Delta(0, "Checking.\n<tool_call>\n{\"name\": \"get_weather\", "));
  b.OnDelta(Delta(0, "\"arguments\": {\"city\":\"Paris\"}}\n</tool_call>"));
  b.OnChoiceDone({0, FinishReason::kStop, 20});
  json r = json::parse(b.FinalResponse(Summary(5, 20)));
  const json& choice = r["choices"][0];
  EXPECT_EQ(choice["finish_reason"], "tool_calls");
  EXPECT_EQ(choice["message"]["content"], "Checking.\n");
  ASSERT_EQ(choice["message"]["tool_calls"].size(), 1u);
  const json& call = choice["message"]["tool_calls"][0];
  EXPECT_EQ(call["id"], "chatcmpl-tool-7-0-0");
  EXPECT_EQ(call["type"], "function");
  EXPECT_EQ(call["function"]["name"], "get_weather");
  EXPECT_EQ(call["function"]["arguments"], "{\"city\": \"Paris\"}");
  EXPECT_FALSE(call.contains("index"));
}

TEST_F(BuilderTest, ChatToolCallsOffOrMalformedGiveContent) {
  const std::string call =
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {}}\n</tool_call>";
  // tool_choice "none": the tools are shown to the model, the output is text.
  OpenAiRequest none =
      Parse(OpenAiEndpoint::kChat, absl::StrCat(kToolRequest, R"(,"tool_choice":"none"})"));
  EXPECT_FALSE(none.parse_tool_calls);
  EXPECT_EQ(none.gen.tools.size(), 1u);
  // Malformed JSON in the block: content, finish_reason as the engine said.
  OpenAiRequest with = Parse(OpenAiEndpoint::kChat, absl::StrCat(kToolRequest, "}"));
  for (const auto& [req, text] : {std::pair<const OpenAiRequest*, std::string>{&none, call},
                                  {&with, "<tool_call>\n{\"name\": \"get_weather\", \"arg"}}) {
    OpenAiResponseBuilder b(*req, model(), "chatcmpl-8", 1);
    b.OnDelta(Delta(0, text));
    b.OnChoiceDone({0, FinishReason::kLength, 9});
    json r = json::parse(b.FinalResponse(Summary(5, 9)));
    EXPECT_EQ(r["choices"][0]["finish_reason"], "length");
    EXPECT_EQ(r["choices"][0]["message"]["content"], text);
    EXPECT_FALSE(r["choices"][0]["message"].contains("tool_calls"));
  }
}

TEST_F(BuilderTest, ChatToolCallsStreaming) {
  OpenAiRequest req =
      Parse(OpenAiEndpoint::kChat, absl::StrCat(kToolRequest, R"(,"stream":true})"));
  OpenAiResponseBuilder b(req, model(), "chatcmpl-9", 1);
  std::vector<std::string> chunks = b.OnDelta(Delta(0, "Sure.<tool_call>\n{\"name\": \"a\", "));
  ASSERT_EQ(chunks.size(), 2u);  // role, then the text before the call
  EXPECT_EQ(json::parse(chunks[1])["choices"][0]["delta"]["content"], "Sure.");
  // The first call is sent when its block closes.
  chunks = b.OnDelta(Delta(0, "\"arguments\": {\"x\": 1}}\n</tool_call>\n<tool_call>\n"));
  ASSERT_EQ(chunks.size(), 1u);
  json delta = json::parse(chunks[0])["choices"][0]["delta"];
  EXPECT_FALSE(delta.contains("content"));
  ASSERT_EQ(delta["tool_calls"].size(), 1u);
  EXPECT_EQ(delta["tool_calls"][0]["index"], 0);
  EXPECT_EQ(delta["tool_calls"][0]["id"], "chatcmpl-tool-9-0-0");
  EXPECT_EQ(delta["tool_calls"][0]["type"], "function");
  EXPECT_EQ(delta["tool_calls"][0]["function"]["name"], "a");
  EXPECT_EQ(delta["tool_calls"][0]["function"]["arguments"], "{\"x\": 1}");
  // The second, unterminated at the end of the output, comes with the finish.
  EXPECT_TRUE(b.OnDelta(Delta(0, "{\"name\": \"b\", \"arguments\": {}}")).empty());
  json fin = json::parse(b.OnChoiceDone({0, FinishReason::kStop, 30}));
  EXPECT_EQ(fin["choices"][0]["finish_reason"], "tool_calls");
  ASSERT_EQ(fin["choices"][0]["delta"]["tool_calls"].size(), 1u);
  EXPECT_EQ(fin["choices"][0]["delta"]["tool_calls"][0]["index"], 1);
  EXPECT_EQ(fin["choices"][0]["delta"]["tool_calls"][0]["function"]["name"], "b");
}

TEST(ModelListTest, ListsServedModels) {
  ModelCatalog catalog = testing::StoriesCatalog();
  json j = json::parse(ModelListJson(catalog, 5));
  EXPECT_EQ(j["object"], "list");
  ASSERT_EQ(j["data"].size(), 1u);
  EXPECT_EQ(j["data"][0]["id"], "stories260K");
  EXPECT_EQ(j["data"][0]["object"], "model");
  EXPECT_GT(j["data"][0]["context_length"].get<int>(), 0);
}

}  // namespace
}  // namespace tandem::router
