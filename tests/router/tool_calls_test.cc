// The Hermes tool-call parser (router/tool_calls.h) on hand-written outputs:
// what vLLM's Hermes2ProToolParser.extract_tool_calls returns for each (one
// call, two calls, text before, an unterminated last block, malformed JSON,
// a missing "arguments"), the bare / ```json form, the stream against the
// whole-text parse, and Python's json.dumps spelling.

#include "router/tool_calls.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"

namespace tandem::router {

void PrintTo(const ToolCall& c, std::ostream* os) { *os << c.name << "(" << c.arguments << ")"; }

namespace {

using ojson = nlohmann::ordered_json;

const std::vector<std::string> kTools = {"get_weather", "convert"};

TEST(PythonJsonDumpsTest, SpellsAsJsonDumps) {
  // Each expected string is what python3 -c 'import json; print(json.dumps(v,
  // ensure_ascii=False))' prints for the same value.
  EXPECT_EQ(PythonJsonDumps(ojson::parse(R"({"b":1,"a":[true,null,2.5,-0.0,1e-05],"c":{}})")),
            R"({"b": 1, "a": [true, null, 2.5, -0.0, 1e-05], "c": {}})");
  EXPECT_EQ(PythonJsonDumps(ojson::parse(R"(["é ¥ 😀","q\"\\\n\t\u0001/",[],1.0,100])")),
            "[\"é ¥ 😀\", \"q\\\"\\\\\\n\\t\\u0001/\", [], 1.0, 100]");
  EXPECT_EQ(PythonJsonDumps(ojson("x")), "\"x\"");
}

TEST(ParseHermesToolCallsTest, OneCall) {
  const ParsedToolCalls p = ParseHermesToolCalls(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\":\"Paris\"}}\n</tool_call>",
      kTools);
  EXPECT_THAT(p.calls, ::testing::ElementsAre(ToolCall{"get_weather", "{\"city\": \"Paris\"}"}));
  EXPECT_FALSE(p.content.has_value());
}

TEST(ParseHermesToolCallsTest, TwoCallsTextBeforeAndBetween) {
  // Text before the first block is the content; text between and after the
  // blocks is dropped (vLLM). Names need not be among the tools.
  const ParsedToolCalls p = ParseHermesToolCalls(
      "Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n</tool_call>\nand\n"
      "<tool_call>{\"arguments\": [1, {\"z\": 2, \"y\": 3}], \"name\": \"b\"}</tool_call> bye",
      kTools);
  EXPECT_THAT(p.calls, ::testing::ElementsAre(ToolCall{"a", "{}"},
                                              ToolCall{"b", "[1, {\"z\": 2, \"y\": 3}]"}));
  EXPECT_EQ(p.content, "Let me check.\n");
}

TEST(ParseHermesToolCallsTest, UnterminatedLastBlockIsACall) {
  const ParsedToolCalls p = ParseHermesToolCalls(
      "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Oslo\"}}\n", kTools);
  EXPECT_THAT(p.calls, ::testing::ElementsAre(ToolCall{"get_weather", "{\"city\": \"Oslo\"}"}));
}

TEST(ParseHermesToolCallsTest, MalformedBlocksLeaveEverythingAsContent) {
  for (const char* out : {
           // not JSON (cut off)
           "Sure <tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": ",
           // the second of two blocks is bad
           "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call><tool_call>{oops}"
           "</tool_call>",
           // no "arguments", a name that is not a string, not an object
           "<tool_call>{\"name\": \"a\"}</tool_call>",
           "<tool_call>{\"name\": 3, \"arguments\": {}}</tool_call>",
           "<tool_call>[\"a\"]</tool_call>",
       }) {
    const ParsedToolCalls p = ParseHermesToolCalls(out, kTools);
    EXPECT_TRUE(p.calls.empty()) << out;
    EXPECT_EQ(p.content, out);
  }
}

TEST(ParseHermesToolCallsTest, PlainTextIsContent) {
  const ParsedToolCalls p = ParseHermesToolCalls("It is sunny in Paris.", kTools);
  EXPECT_TRUE(p.calls.empty());
  EXPECT_EQ(p.content, "It is sunny in Paris.");
}

TEST(ParseHermesToolCallsTest, BareOrFencedCallNamingATool) {
  // What Qwen2.5-Coder-0.5B writes instead of the tags.
  for (const char* out : {
           "{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}",
           "```json\n{\n  \"name\": \"get_weather\",\n  \"arguments\": {\n    \"city\": "
           "\"Paris\"\n  }\n}\n```",
           "  \n{\"name\":\"get_weather\",\"arguments\":{\"city\":\"Paris\"}}\n",
       }) {
    const ParsedToolCalls p = ParseHermesToolCalls(out, kTools);
    EXPECT_THAT(p.calls, ::testing::ElementsAre(ToolCall{"get_weather", "{\"city\": \"Paris\"}"}))
        << out;
    EXPECT_FALSE(p.content.has_value()) << out;
  }
  // Not a call: an unknown name, two objects, text around, an unclosed fence,
  // a JSON answer that is no call.
  for (const char* out : {
           "{\"name\": \"get_time\", \"arguments\": {}}",
           "{\"name\": \"get_weather\", \"arguments\": {}}\n{\"name\": \"get_weather\", "
           "\"arguments\": {}}",
           "Call: {\"name\": \"get_weather\", \"arguments\": {}}",
           "```json\n{\"name\": \"get_weather\", \"arguments\": {}}\n",
           "{\"name\": \"get_weather\"}",
       }) {
    const ParsedToolCalls p = ParseHermesToolCalls(out, kTools);
    EXPECT_TRUE(p.calls.empty()) << out;
    EXPECT_EQ(p.content, out);
  }
}

// The stream, fed `out` in pieces of `step` bytes: what it sends in total.
struct Streamed {
  std::string content;
  std::vector<ToolCall> calls;
  std::string content_before_end;  // sent before Finish
};

Streamed Stream(const std::string& out, size_t step) {
  HermesToolStream s(kTools);
  Streamed r;
  for (size_t i = 0; i < out.size(); i += step) {
    HermesToolStream::Update u = s.Add(out.substr(i, step));
    r.content += u.content;
    r.calls.insert(r.calls.end(), u.calls.begin(), u.calls.end());
  }
  r.content_before_end = r.content;
  HermesToolStream::Update u = s.Finish();
  r.content += u.content;
  r.calls.insert(r.calls.end(), u.calls.begin(), u.calls.end());
  EXPECT_EQ(s.calls_sent(), r.calls.size());
  return r;
}

TEST(HermesToolStreamTest, SameAsTheWholeTextParse) {
  for (const std::string& out : {
           std::string("It is sunny."),
           std::string("Let me check.\n<tool_call>\n{\"name\": \"a\", \"arguments\": {}}\n"
                       "</tool_call>\n<tool_call>\n{\"name\": \"b\", \"arguments\": {\"x\": 1}}\n"
                       "</tool_call>"),
           std::string("<tool_call>\n{\"name\": \"a\", \"arguments\": {\"x\": [1, 2]}}\n"),
           std::string("Sure <tool_call>{broken</tool_call> after"),
           std::string("```json\n{\"name\": \"get_weather\", \"arguments\": {}}\n```"),
           std::string("{\"answer\": 42}"),
           std::string("a < b and <tool_cal is not a tag"),
       }) {
    const ParsedToolCalls whole = ParseHermesToolCalls(out, kTools);
    for (size_t step : {1, 3, 1000}) {
      const Streamed s = Stream(out, step);
      EXPECT_EQ(s.calls, whole.calls) << out << " step " << step;
      EXPECT_EQ(s.content, whole.content.value_or("")) << out << " step " << step;
    }
  }
}

TEST(HermesToolStreamTest, SendsTextEarlyAndHoldsOnlyWhatMayBeACall) {
  // Plain text goes out as it comes, except a possible "<tool_call>" prefix.
  HermesToolStream s(kTools);
  EXPECT_EQ(s.Add("Hello <tool").content, "Hello ");
  EXPECT_EQ(s.Add("s are fun").content, "<tools are fun");
  // A call is sent when its block closes, before the end.
  HermesToolStream t(kTools);
  EXPECT_EQ(t.Add("Hi<tool_call>{\"name\": \"a\", ").content, "Hi");
  HermesToolStream::Update u = t.Add("\"arguments\": {}}</tool_call>");
  EXPECT_THAT(u.calls, ::testing::ElementsAre(ToolCall{"a", "{}"}));
  // A malformed block after a sent call: the call stays, the rest is content.
  EXPECT_TRUE(t.Add("<tool_call>{nope").calls.empty());
  u = t.Finish();
  EXPECT_TRUE(u.calls.empty());
  EXPECT_EQ(u.content, "<tool_call>{nope");
  // Output that may be a bare call is held until the end.
  const Streamed bare = Stream("{\"name\": \"x\"}", 2);
  EXPECT_EQ(bare.content_before_end, "");
  EXPECT_EQ(bare.content, "{\"name\": \"x\"}");
}

}  // namespace
}  // namespace tandem::router
