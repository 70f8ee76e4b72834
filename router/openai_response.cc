#include "router/openai_response.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "absl/strings/strip.h"
#include "nlohmann/json.hpp"

namespace tandem::router {
namespace {

using json = nlohmann::json;

std::string Dump(const json& j) {
  return j.dump(-1, ' ', false, json::error_handler_t::replace);
}

json RoleDelta() { return json{{"role", "assistant"}, {"content", ""}}; }

}  // namespace

std::string SseEvent(absl::string_view data) {
  std::string out;
  for (absl::string_view line : absl::StrSplit(data, '\n')) {
    if (!line.empty() && line.back() == '\r') {
      line.remove_suffix(1);
    }
    absl::StrAppend(&out, "data: ", line, "\n");
  }
  out += "\n";
  return out;
}

std::string SseDone() { return "data: [DONE]\n\n"; }

std::string SseKeepAlive() { return ": keep-alive\n\n"; }

// --- responses ------------------------------------------------------------------

OpenAiResponseBuilder::OpenAiResponseBuilder(const OpenAiRequest& request, const ServedModel& model,
                                             std::string id, int64_t created_unix_seconds)
    : request_(request), model_(model), id_(std::move(id)), created_(created_unix_seconds) {
  choices_.resize(std::max(1, request.gen.n));
  if (request.parse_tool_calls) {
    for (Choice& c : choices_) {
      c.tool_stream.emplace(request.tool_names);
    }
  }
}

json OpenAiResponseBuilder::ToolCallsJson(int32_t index, size_t first,
                                          const std::vector<ToolCall>& calls,
                                          bool with_index) const {
  json out = json::array();
  for (size_t k = 0; k < calls.size(); ++k) {
    json call;
    if (with_index) {
      call["index"] = first + k;
    }
    // Unique within the response, whose id is random.
    call["id"] = absl::StrCat("chatcmpl-tool-", absl::StripPrefix(id_, "chatcmpl-"), "-", index,
                              "-", first + k);
    call["type"] = "function";
    call["function"] = json{{"name", calls[k].name}, {"arguments", calls[k].arguments}};
    out.push_back(std::move(call));
  }
  return out;
}

std::string OpenAiResponseBuilder::ChunkBase(int32_t index, json delta, json logprobs,
                                             const std::string& finish) const {
  const bool chat = request_.endpoint == OpenAiEndpoint::kChat;
  json choice;
  choice["index"] = index;
  choice[chat ? "delta" : "text"] = std::move(delta);
  choice["logprobs"] = std::move(logprobs);
  choice["finish_reason"] = finish.empty() ? json(nullptr) : json(finish);
  json chunk;
  chunk["id"] = id_;
  chunk["object"] = chat ? "chat.completion.chunk" : "text_completion";
  chunk["created"] = created_;
  chunk["model"] = model_.name();
  chunk["choices"] = json::array({std::move(choice)});
  if (request_.include_usage) {
    chunk["usage"] = nullptr;
  }
  return Dump(chunk);
}

json OpenAiResponseBuilder::CompletionLogprobsJson(const Choice& c, size_t from) const {
  json lp;
  lp["tokens"] = json::array();
  lp["token_logprobs"] = json::array();
  lp["top_logprobs"] = json::array();
  lp["text_offset"] = json::array();
  for (size_t i = from; i < c.lp_tokens.size(); ++i) {
    lp["tokens"].push_back(c.lp_tokens[i]);
    lp["token_logprobs"].push_back(c.lp_values[i]);
    json top = json::object();
    for (const auto& [text, value] : c.lp_top[i]) {
      top[text] = value;
    }
    lp["top_logprobs"].push_back(std::move(top));
    lp["text_offset"].push_back(c.lp_offsets[i]);
  }
  return lp;
}

json OpenAiResponseBuilder::ChatLogprobsJson(const Choice& c, size_t from) const {
  json content = json::array();
  for (size_t i = from; i < c.chat_lp.size(); ++i) {
    content.push_back(c.chat_lp[i]);
  }
  return json{{"content", std::move(content)}};
}

std::vector<std::string> OpenAiResponseBuilder::OnDelta(const ChoiceDelta& delta) {
  std::vector<std::string> out;
  if (delta.index < 0 || delta.index >= static_cast<int32_t>(choices_.size())) {
    return out;
  }
  Choice& c = choices_[delta.index];
  const bool chat = request_.endpoint == OpenAiEndpoint::kChat;
  const engine::Tokenizer& tok = model_.tokenizer();
  const size_t lp_from = chat ? c.chat_lp.size() : c.lp_tokens.size();
  const bool want_lp = chat ? request_.chat_logprobs : request_.completion_logprobs >= 0;
  if (want_lp) {
    int64_t offset = static_cast<int64_t>(c.text.size());
    for (const TokenOutput& t : delta.tokens) {
      const std::string text = TokenDisplayText(tok, t.id);
      if (chat) {
        json e;
        e["token"] = text;
        e["logprob"] = t.logprob;
        json bytes = json::array();
        for (unsigned char b : tok.TokenToPiece(t.id)) {
          bytes.push_back(static_cast<int>(b));
        }
        e["bytes"] = std::move(bytes);
        json top = json::array();
        for (const TopLogprob& tl : t.top_logprobs) {
          json te;
          te["token"] = TokenDisplayText(tok, tl.token);
          te["logprob"] = tl.logprob;
          json tb = json::array();
          for (unsigned char b : tok.TokenToPiece(tl.token)) {
            tb.push_back(static_cast<int>(b));
          }
          te["bytes"] = std::move(tb);
          top.push_back(std::move(te));
        }
        e["top_logprobs"] = std::move(top);
        c.chat_lp.push_back(std::move(e));
      } else {
        c.lp_tokens.push_back(text);
        c.lp_values.push_back(t.logprob);
        std::vector<std::pair<std::string, float>> top;
        for (const TopLogprob& tl : t.top_logprobs) {
          top.emplace_back(TokenDisplayText(tok, tl.token), tl.logprob);
        }
        c.lp_top.push_back(std::move(top));
        c.lp_offsets.push_back(offset);
      }
    }
  }
  c.text += delta.text;
  if (!request_.stream) {
    return out;
  }
  json logprobs = nullptr;
  if (want_lp && !delta.tokens.empty()) {
    logprobs = chat ? ChatLogprobsJson(c, lp_from) : CompletionLogprobsJson(c, lp_from);
  }
  if (chat) {
    if (!c.role_sent) {
      c.role_sent = true;
      out.push_back(ChunkBase(delta.index, RoleDelta(), nullptr, ""));
    }
    std::string text = delta.text;
    std::vector<ToolCall> calls;
    size_t first_call = 0;
    if (c.tool_stream.has_value()) {
      first_call = c.tool_stream->calls_sent();
      HermesToolStream::Update u = c.tool_stream->Add(delta.text);
      text = std::move(u.content);
      calls = std::move(u.calls);
    }
    if (!text.empty() || !logprobs.is_null()) {
      out.push_back(ChunkBase(delta.index, json{{"content", text}}, logprobs, ""));
    }
    if (!calls.empty()) {
      out.push_back(ChunkBase(delta.index,
                              json{{"tool_calls", ToolCallsJson(delta.index, first_call, calls,
                                                                /*with_index=*/true)}},
                              nullptr, ""));
    }
  } else if (!delta.text.empty() || !logprobs.is_null()) {
    out.push_back(ChunkBase(delta.index, delta.text, logprobs, ""));
  }
  return out;
}

std::string OpenAiResponseBuilder::OnChoiceDone(const ChoiceResult& result) {
  if (result.index < 0 || result.index >= static_cast<int32_t>(choices_.size())) {
    return "";
  }
  Choice& c = choices_[result.index];
  c.finish = result.reason;
  const bool chat = request_.endpoint == OpenAiEndpoint::kChat;
  std::string finish = result.reason == FinishReason::kLength ? "length" : "stop";
  if (chat) {
    json delta = json::object();
    if (!c.role_sent) {
      c.role_sent = true;
      delta = RoleDelta();
    }
    if (c.tool_stream.has_value() && request_.stream) {
      const size_t first_call = c.tool_stream->calls_sent();
      HermesToolStream::Update u = c.tool_stream->Finish();
      if (!u.content.empty()) {
        delta["content"] = std::move(u.content);
      }
      if (!u.calls.empty()) {
        delta["tool_calls"] = ToolCallsJson(result.index, first_call, u.calls, /*with_index=*/true);
      }
      if (c.tool_stream->calls_sent() > 0) {
        finish = "tool_calls";  // as vLLM, whatever ended the output
      }
    }
    return ChunkBase(result.index, std::move(delta), nullptr, finish);
  }
  return ChunkBase(result.index, "", nullptr, finish);
}

json OpenAiResponseBuilder::UsageJson(const RequestSummary& s) const {
  json u;
  u["prompt_tokens"] = s.prompt_tokens;
  u["completion_tokens"] = s.completion_tokens;
  u["total_tokens"] = s.prompt_tokens + s.completion_tokens;
  u["prompt_tokens_details"] = json{{"cached_tokens", s.cached_prompt_tokens}};
  return u;
}

std::string OpenAiResponseBuilder::UsageChunk(const RequestSummary& summary) const {
  json chunk;
  chunk["id"] = id_;
  chunk["object"] =
      request_.endpoint == OpenAiEndpoint::kChat ? "chat.completion.chunk" : "text_completion";
  chunk["created"] = created_;
  chunk["model"] = model_.name();
  chunk["choices"] = json::array();
  chunk["usage"] = UsageJson(summary);
  return Dump(chunk);
}

std::string OpenAiResponseBuilder::FinalResponse(const RequestSummary& summary) const {
  const bool chat = request_.endpoint == OpenAiEndpoint::kChat;
  json resp;
  resp["id"] = id_;
  resp["object"] = chat ? "chat.completion" : "text_completion";
  resp["created"] = created_;
  resp["model"] = model_.name();
  json choices = json::array();
  for (size_t i = 0; i < choices_.size(); ++i) {
    const Choice& c = choices_[i];
    json choice;
    choice["index"] = i;
    std::string finish = !c.finish.has_value()                ? ""
                         : *c.finish == FinishReason::kLength ? "length"
                                                              : "stop";
    if (chat && request_.parse_tool_calls) {
      ParsedToolCalls parsed = ParseHermesToolCalls(c.text, request_.tool_names);
      json message{{"role", "assistant"},
                   {"content", parsed.content.has_value() ? json(*parsed.content) : json(nullptr)}};
      if (!parsed.calls.empty()) {
        message["tool_calls"] =
            ToolCallsJson(static_cast<int32_t>(i), 0, parsed.calls, /*with_index=*/false);
        if (!finish.empty()) {
          finish = "tool_calls";
        }
      }
      choice["message"] = std::move(message);
      choice["logprobs"] = request_.chat_logprobs ? ChatLogprobsJson(c, 0) : json(nullptr);
    } else if (chat) {
      choice["message"] = json{{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = request_.chat_logprobs ? ChatLogprobsJson(c, 0) : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] =
          request_.completion_logprobs >= 0 ? CompletionLogprobsJson(c, 0) : json(nullptr);
    }
    choice["finish_reason"] = finish.empty() ? json(nullptr) : json(finish);
    choices.push_back(std::move(choice));
  }
  resp["choices"] = std::move(choices);
  resp["usage"] = UsageJson(summary);
  return Dump(resp);
}

std::string ModelListJson(const ModelCatalog& catalog, int64_t created_unix_seconds) {
  json data = json::array();
  for (const auto& m : catalog.models()) {
    data.push_back(json{{"id", m->name()},
                        {"object", "model"},
                        {"created", created_unix_seconds},
                        {"owned_by", "tandem"},
                        {"context_length", m->context_length()},
                        {"architecture", m->architecture()}});
  }
  if (!catalog.routed_alias().empty()) {  // complexity routing picks one of routes_to
    data.push_back(json{{"id", catalog.routed_alias()},
                        {"object", "model"},
                        {"created", created_unix_seconds},
                        {"owned_by", "tandem"},
                        {"context_length", catalog.RoutedContextLength()},
                        {"architecture", "router"},
                        {"routes_to", catalog.routed_models()}});
  }
  return Dump(json{{"object", "list"}, {"data", std::move(data)}});
}

}  // namespace tandem::router
