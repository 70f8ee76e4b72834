#pragma once
// A generation request as the router sees it, independent of the front
// (gRPC Generate, OpenAI completions, OpenAI chat), and its validation:
// model lookup, chat rendering, tokenization, and the limits (prompt length,
// max_tokens against the context, n, logprobs, stop strings, sampling).
//
// Pure functions; any thread.

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "absl/time/time.h"
#include "common/engine/sampling.h"
#include "router/chat_template.h"
#include "router/config.h"
#include "router/model_catalog.h"
#include "router/semantic_cache.h"

namespace tandem::router {

struct GenerationRequest {
  std::string model;                      // "" = the only model
  // Exactly one of: prompt text, prompt token ids, chat messages.
  std::optional<std::string> prompt_text;
  std::optional<std::vector<int32_t>> prompt_ids;
  std::optional<std::vector<ChatMessage>> messages;
  // Chat: the tool definitions, each as the chat template's tojson writes it.
  std::vector<std::string> tools;
  std::optional<int32_t> max_tokens;      // unset = default (capped by the context)
  int32_t n = 1;                          // independent choices
  engine::SamplingParams sampling;                // stop_strings are the client's stop strings
  bool has_seed = false;
  bool add_special_tokens = true;         // BOS on text prompts (when the vocab wants it)
  // The client's id (X-Request-Id / request_id): echoed and logged only,
  // never a key on a worker. "" = the router makes one up to echo.
  std::string request_id;
  std::string tenant;
  // Names the parameters in errors: the OpenAI names ("logprobs",
  // "top_logprobs" for chat) or the gRPC field names.
  std::string logprobs_param = "logprobs";
  // The client's Cache-Control (HTTP header / gRPC metadata), "" = none
  // (router/semantic_cache.h).
  std::string cache_control;
};

struct PreparedRequest {
  const ServedModel* model = nullptr;
  // The router's own id, 128 random bits in hex, fresh for every request: the
  // key of every worker call (Reserve, Prefill, Commit, Cancel). Never shown
  // to a client, so no client can name another's request on a worker.
  std::string request_id;
  // What the client sent (or a separate random id when it sent none):
  // echoed back and logged. Two requests may share it.
  std::string client_request_id;
  std::string tenant;
  std::vector<int32_t> prompt_ids;
  int32_t max_tokens = 0;
  int32_t n = 1;
  engine::SamplingParams sampling;                // as sent to workers (client stop strings included)
  bool has_seed = false;
  // What the router matches: the client's stop strings plus the chat
  // template's end-of-turn markers.
  std::vector<std::string> stop_strings;
  absl::Time deadline = absl::InfiniteFuture();
  bool chat = false;
  // The response cache's key; not eligible when the cache is off.
  CacheRequest cache;
  // Complexity routing (router/complexity.h): the pool that serves the
  // request and the prompt's score; "" when the request named its model.
  std::string route_pool;
  double complexity_score = 0;
};

// Validates and tokenizes. Every failure is InvalidArgument naming the
// parameter (see router/api_error.h): unknown model, invalid UTF-8, empty
// prompt, token ids outside the vocabulary, prompt over the limit,
// max_tokens <= 0 or prompt + max_tokens over the context, n outside
// [1, max_n], logprobs over max_logprobs, too many / empty / too long stop
// strings, sampling values out of range.
absl::StatusOr<PreparedRequest> PrepareRequest(const GenerationRequest& request,
                                               const ModelCatalog& catalog,
                                               const LimitsConfig& limits);

// A token's text for logprob fields: its bytes when they are valid UTF-8,
// else its vocabulary entry ("<0xE4>"), so responses stay valid UTF-8.
std::string TokenDisplayText(const engine::Tokenizer& tokenizer, int32_t id);

}  // namespace tandem::router
