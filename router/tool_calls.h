#pragma once
// OpenAI tool calling for Hermes-style models (Qwen2.5): the model is shown
// the tools by its chat template (router/chat_template.h) and answers with
//
//   <tool_call>
//   {"name": "get_weather", "arguments": {"city": "Paris"}}
//   </tool_call>
//
// blocks, which become choices[i].message.tool_calls. The parser is vLLM's
// Hermes2ProToolParser (`--tool-call-parser hermes`): every
// <tool_call>...</tool_call> block (the last may be unterminated) must be a
// JSON object with a string "name" and an "arguments" value, else the whole
// output stays content; the content is the text before the first block.
// One addition, from llama.cpp's Hermes 2 Pro parser: an output with no
// <tool_call> that is, as a whole, one such JSON object (bare or in a ```json
// fence) naming one of the request's tools is a call too -- Qwen2.5-Coder-0.5B
// answers that way instead of writing the tags.
//
// Pure; any thread (HermesToolStream: one per choice, not thread-safe).

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "nlohmann/json.hpp"

namespace tandem::router {

// `value` as Python's json.dumps(value, ensure_ascii=False) writes it -- what
// transformers' `tojson` Jinja filter gives a chat template: ", " and ": "
// separators, keys in their order, non-ASCII as is.
std::string PythonJsonDumps(const nlohmann::ordered_json& value);

struct ToolCall {
  std::string name;
  std::string arguments;  // JSON text (PythonJsonDumps of the model's "arguments")
  friend bool operator==(const ToolCall&, const ToolCall&) = default;
};

struct ParsedToolCalls {
  std::vector<ToolCall> calls;         // empty: no tool call, `content` is the whole output
  std::optional<std::string> content;  // nullopt when calls were found and no text precedes
};

// The tool calls in a model's whole output. `tool_names` are the request's
// tools (for the bare-JSON form only).
ParsedToolCalls ParseHermesToolCalls(absl::string_view output,
                                     absl::Span<const std::string> tool_names);

// ParseHermesToolCalls for a stream: fed the output's text deltas, it returns
// the content that is safe to show now and each tool call once its block is
// complete; text that may still turn into a call is held back until Finish.
// A stream gives the same calls and content as ParseHermesToolCalls on the
// whole text, except when a block after an already sent call is malformed:
// the sent calls stay and the text after them is sent as content.
class HermesToolStream {
 public:
  explicit HermesToolStream(std::vector<std::string> tool_names)
      : tool_names_(std::move(tool_names)) {}

  struct Update {
    std::string content;          // to send now ("" = nothing)
    std::vector<ToolCall> calls;  // complete calls to send now
  };
  Update Add(absl::string_view delta);
  // The end of the output: what is left.
  Update Finish();
  // Tool calls sent so far.
  size_t calls_sent() const { return calls_sent_; }

 private:
  enum class Stage {
    kText,    // no <tool_call> yet: content (or a bare call, held back)
    kCalls,   // in the calls: each block becomes a call once complete
    kFailed,  // a malformed block: the rest is content
  };
  Update Advance(bool final);

  std::vector<std::string> tool_names_;
  std::string text_;  // the output so far
  Stage stage_ = Stage::kText;
  size_t sent_ = 0;  // bytes of text_ sent (as content or as calls)
  size_t calls_sent_ = 0;
};

}  // namespace tandem::router
