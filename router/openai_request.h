#pragma once
// The OpenAI-compatible wire format, request side: parsing /v1/completions
// and /v1/chat/completions bodies into the router's GenerationRequest. Pure:
// no I/O, no router state, so every bad-input case is unit-tested. The
// response side (JSON bodies, stream chunks, SSE framing) is
// openai_response.h.

#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "router/request.h"

namespace tandem::router {

enum class OpenAiEndpoint { kCompletions, kChat };

struct OpenAiRequest {
  OpenAiEndpoint endpoint = OpenAiEndpoint::kCompletions;
  GenerationRequest gen;
  bool stream = false;
  bool include_usage = false;      // stream_options.include_usage
  // Completions: logprobs=k asks for the chosen token's logprob and the k
  // most likely (-1 = none). Chat: logprobs (bool) + top_logprobs.
  int32_t completion_logprobs = -1;
  bool chat_logprobs = false;
  // Chat with tools and tool_choice "auto": the output's <tool_call> blocks
  // become tool_calls (router/tool_calls.h). tool_names: the tools' names.
  bool parse_tool_calls = false;
  std::vector<std::string> tool_names;
};

// Parses a request body. InvalidArgument naming the parameter for malformed
// JSON (with the byte position), a non-object body, wrong types, missing or
// empty prompt / messages, unsupported options (echo, suffix, best_of != n,
// tool_choice "required" or a named function, logit_bias, non-text content
// parts), malformed tools or tool_calls, invalid UTF-8. Tools the model's
// template cannot show are refused later, by PrepareRequest. Limits that need
// the model (lengths, vocabulary, caps) are checked later by PrepareRequest.
// Defaults follow OpenAI: temperature 1, top_p 1, n 1; completions
// max_tokens 16; chat max_tokens = the router's default.
absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint, absl::string_view body);

}  // namespace tandem::router
