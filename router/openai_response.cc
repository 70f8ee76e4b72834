#include "router/openai_response.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
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
    if (!delta.text.empty() || !logprobs.is_null()) {
      out.push_back(ChunkBase(delta.index, json{{"content", delta.text}}, logprobs, ""));
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
  const std::string finish = result.reason == FinishReason::kLength ? "length" : "stop";
  if (chat) {
    if (!c.role_sent) {
      c.role_sent = true;
      return ChunkBase(result.index, RoleDelta(), nullptr, finish);
    }
    return ChunkBase(result.index, json::object(), nullptr, finish);
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
    if (chat) {
      choice["message"] = json{{"role", "assistant"}, {"content", c.text}};
      choice["logprobs"] = request_.chat_logprobs ? ChatLogprobsJson(c, 0) : json(nullptr);
    } else {
      choice["text"] = c.text;
      choice["logprobs"] =
          request_.completion_logprobs >= 0 ? CompletionLogprobsJson(c, 0) : json(nullptr);
    }
    choice["finish_reason"] =
        !c.finish.has_value() ? json(nullptr)
                              : json(*c.finish == FinishReason::kLength ? "length" : "stop");
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
  return Dump(json{{"object", "list"}, {"data", std::move(data)}});
}

}  // namespace tandem::router
