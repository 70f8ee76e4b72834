#pragma once
// The OpenAI-compatible wire format, response side: response and
// stream-chunk JSON for a parsed OpenAiRequest (openai_request.h), SSE
// framing and the model list. Pure: no I/O, no router state, so every frame
// is unit-tested.

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/strings/string_view.h"
#include "nlohmann/json.hpp"
#include "router/generation.h"
#include "router/model_catalog.h"
#include "router/openai_request.h"
#include "router/tool_calls.h"

namespace tandem::router {

// One SSE event carrying `data` ("data: <line>\n" per line, then "\n").
std::string SseEvent(absl::string_view data);
// The terminator OpenAI clients wait for: "data: [DONE]\n\n".
std::string SseDone();
// A comment line that keeps a silent stream alive (and detects a dead peer).
std::string SseKeepAlive();

// Builds responses for one request. Feed it the run's events in order; it
// returns stream chunks (JSON objects, not yet SSE-framed) and accumulates
// the non-streaming response. Not thread-safe (one per request).
class OpenAiResponseBuilder {
 public:
  OpenAiResponseBuilder(const OpenAiRequest& request, const ServedModel& model,
                        std::string id, int64_t created_unix_seconds);

  // Chunks for a text/token delta (chat: the first chunk of a choice also
  // carries the assistant role). May return none when nothing is visible yet.
  // With request.parse_tool_calls, text that may be a tool call is held back
  // and each call is sent, whole, once its block is complete:
  // {"tool_calls": [{"index", "id", "type": "function", "function": {"name",
  // "arguments"}}]} (vLLM sends the name first and the arguments in pieces;
  // clients accumulate both forms alike).
  std::vector<std::string> OnDelta(const ChoiceDelta& delta);
  // The chunk with the choice's finish_reason ("tool_calls" when the choice
  // made calls), carrying what was held back.
  std::string OnChoiceDone(const ChoiceResult& result);
  // The stream_options.include_usage chunk: "choices": [] and the usage.
  std::string UsageChunk(const RequestSummary& summary) const;
  // The whole non-streaming response.
  std::string FinalResponse(const RequestSummary& summary) const;

  const std::string& id() const { return id_; }

 private:
  struct Choice {
    std::string text;
    bool role_sent = false;
    std::optional<HermesToolStream> tool_stream;  // with request.parse_tool_calls
    std::optional<FinishReason> finish;
    // Completions logprobs.
    std::vector<std::string> lp_tokens;
    std::vector<float> lp_values;
    std::vector<std::vector<std::pair<std::string, float>>> lp_top;
    std::vector<int64_t> lp_offsets;
    // Chat logprobs: the "content" entries.
    std::vector<nlohmann::json> chat_lp;
  };

  // `delta` is the chat delta object or the completion text; `logprobs` null
  // when none.
  std::string ChunkBase(int32_t index, nlohmann::json delta, nlohmann::json logprobs,
                        const std::string& finish) const;
  nlohmann::json CompletionLogprobsJson(const Choice& c, size_t from) const;
  nlohmann::json ChatLogprobsJson(const Choice& c, size_t from) const;
  nlohmann::json UsageJson(const RequestSummary& s) const;
  // tool_calls entries for `calls`, the first being the choice's call number `first`.
  nlohmann::json ToolCallsJson(int32_t index, size_t first, const std::vector<ToolCall>& calls,
                               bool with_index) const;

  const OpenAiRequest& request_;
  const ServedModel& model_;
  const std::string id_;
  const int64_t created_;
  std::vector<Choice> choices_;
};

// The body of GET /v1/models: every served model, then complexity routing's
// alias (architecture "router", routes_to: the pools' models) when configured.
std::string ModelListJson(const ModelCatalog& catalog, int64_t created_unix_seconds);

}  // namespace tandem::router
