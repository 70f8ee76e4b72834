#include "router/request.h"

#include <sys/random.h>

#include <cstdint>
#include <random>

#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "common/base/utf8.h"
#include "router/api_error.h"

namespace tandem::router {
namespace {

// 128 bits from the kernel's CSPRNG (getrandom), as 32 hex digits.
std::string NewRequestId() {
  uint64_t words[2] = {0, 0};
  size_t got = 0;
  auto* bytes = reinterpret_cast<char*>(words);
  while (got < sizeof(words)) {
    const ssize_t n = getrandom(bytes + got, sizeof(words) - got, 0);
    if (n <= 0) {
      break;  // not expected on Linux >= 3.17; fall back below
    }
    got += static_cast<size_t>(n);
  }
  if (got < sizeof(words)) {
    std::random_device rd;  // /dev/urandom-backed on Linux
    words[0] = (uint64_t{rd()} << 32) | rd();
    words[1] = (uint64_t{rd()} << 32) | rd();
  }
  return absl::StrFormat("%016x%016x", words[0], words[1]);
}

// SamplingParams::Validate names the field first ("top_p must be ..."); map
// it to the client-facing parameter.
absl::Status SamplingError(const absl::Status& s, const std::string& logprobs_param) {
  absl::string_view m = s.message();
  std::string param;
  for (const char* field : {"temperature", "top_k", "top_p", "min_p", "repetition_penalty",
                            "repetition_window"}) {
    if (absl::StartsWith(m, field)) {
      param = field;
    }
  }
  if (absl::StartsWith(m, "top_logprobs")) {
    param = logprobs_param;
  } else if (absl::StartsWith(m, "stop_strings")) {
    param = "stop";
  }
  return WithParam(s, param);
}

}  // namespace

std::string TokenDisplayText(const engine::Tokenizer& tokenizer, int32_t id) {
  if (id < 0 || id >= tokenizer.vocab_size()) {
    return "";
  }
  std::string piece = tokenizer.TokenToPiece(id);
  if (base::IsValidUtf8(piece)) {
    return piece;
  }
  const std::string& text = tokenizer.token_text(id);
  return base::IsValidUtf8(text) ? text : "";
}

absl::StatusOr<PreparedRequest> PrepareRequest(const GenerationRequest& request,
                                               const ModelCatalog& catalog,
                                               const LimitsConfig& limits) {
  PreparedRequest out;
  absl::StatusOr<const ServedModel*> model = catalog.Find(request.model);
  if (!model.ok()) {
    return model.status();
  }
  out.model = *model;
  const ServedModel& m = **model;
  const engine::Tokenizer& tok = m.tokenizer();
  out.request_id = NewRequestId();
  out.client_request_id = request.request_id.empty() ? NewRequestId() : request.request_id;
  if (!base::IsValidUtf8(out.client_request_id) || out.client_request_id.size() > 256) {
    return InvalidParam("request_id", "request_id must be valid UTF-8 of at most 256 bytes");
  }
  out.tenant = request.tenant;

  // --- prompt ---------------------------------------------------------------
  const int sources = int{request.prompt_text.has_value()} +
                      int{request.prompt_ids.has_value()} + int{request.messages.has_value()};
  if (sources != 1) {
    return InvalidParam("prompt", sources == 0 ? "a prompt (text, token ids or messages) is required"
                                               : "give only one of prompt text, token ids or "
                                                 "messages");
  }
  std::string prompt_param = "prompt";
  if (request.prompt_ids.has_value()) {
    const std::vector<int32_t>& ids = *request.prompt_ids;
    for (size_t i = 0; i < ids.size(); ++i) {
      if (ids[i] < 0 || ids[i] >= tok.vocab_size()) {
        return InvalidParam("prompt",
                            absl::StrCat("prompt token id ", ids[i], " at index ", i,
                                         " is outside the vocabulary [0, ", tok.vocab_size(),
                                         ")"),
                            "invalid_token_id");
      }
    }
    out.prompt_ids = ids;
  } else {
    std::string text;
    bool parse_special = false;
    std::vector<engine::TextRange> literal;  // byte ranges without control tokens
    if (request.messages.has_value()) {
      prompt_param = "messages";
      out.chat = true;
      for (size_t i = 0; i < request.messages->size(); ++i) {
        size_t bad = 0;
        const ChatMessage& msg = (*request.messages)[i];
        if (!base::IsValidUtf8(msg.content, &bad) || !base::IsValidUtf8(msg.role, &bad)) {
          return InvalidParam(absl::StrCat("messages[", i, "].content"),
                              absl::StrCat("messages[", i, "] is not valid UTF-8 (byte ", bad,
                                           ")"));
        }
      }
      absl::StatusOr<RenderedPrompt> rendered = m.chat_template().RenderWithRanges(
          *request.messages, /*add_generation_prompt=*/true, request.tools);
      if (!rendered.ok()) {
        return rendered.status();
      }
      text = std::move(rendered->text);
      // The template's markers are special tokens where the vocabulary has
      // them; the messages' contents are not (a user's "<|im_end|>" stays
      // text) unless limits.parse_special_in_content.
      parse_special = true;
      if (!limits.parse_special_in_content) {
        literal = std::move(rendered->content_ranges);
      }
    } else {
      text = *request.prompt_text;
    }
    size_t bad = 0;
    if (!base::IsValidUtf8(text, &bad)) {
      return InvalidParam(prompt_param,
                          absl::StrCat(prompt_param, " is not valid UTF-8 (byte ", bad, ")"));
    }
    absl::StatusOr<std::vector<engine::TokenId>> ids =
        tok.Encode(text, request.add_special_tokens && tok.add_bos(), parse_special, literal);
    if (!ids.ok()) {
      return WithParam(ids.status(), prompt_param);
    }
    out.prompt_ids = *std::move(ids);
  }
  if (out.prompt_ids.empty()) {
    return InvalidParam(prompt_param, absl::StrCat(prompt_param, " is empty"));
  }

  // --- lengths ----------------------------------------------------------------
  const int32_t ctx = m.context_length();
  const int32_t prompt_len = static_cast<int32_t>(out.prompt_ids.size());
  int32_t max_prompt = ctx - 1;
  if (limits.max_prompt_tokens > 0 && limits.max_prompt_tokens < max_prompt) {
    max_prompt = limits.max_prompt_tokens;
  }
  if (prompt_len > max_prompt) {
    return InvalidParam(prompt_param,
                        absl::StrCat("This model's maximum context length is ", ctx,
                                     " tokens and the prompt may use at most ", max_prompt,
                                     "; the prompt has ", prompt_len, " tokens"),
                        "context_length_exceeded");
  }
  if (request.max_tokens.has_value()) {
    const int32_t mt = *request.max_tokens;
    if (mt <= 0) {
      return InvalidParam("max_tokens",
                          absl::StrCat("max_tokens must be at least 1, got ", mt));
    }
    if (int64_t{prompt_len} + mt > ctx) {
      return InvalidParam("max_tokens",
                          absl::StrCat("This model's maximum context length is ", ctx,
                                       " tokens; the prompt has ", prompt_len,
                                       " tokens and max_tokens is ", mt, " (",
                                       int64_t{prompt_len} + mt,
                                       " in total). Reduce the prompt or max_tokens."),
                          "context_length_exceeded");
    }
    out.max_tokens = mt;
  } else {
    out.max_tokens = std::min(limits.default_max_tokens, ctx - prompt_len);
  }

  // --- n, logprobs, stop ----------------------------------------------------
  if (request.n < 1 || request.n > limits.max_n) {
    return InvalidParam("n", absl::StrCat("n must be in [1, ", limits.max_n, "], got ", request.n));
  }
  out.n = request.n;
  const engine::SamplingParams& sp = request.sampling;
  if (sp.top_logprobs < 0 || sp.top_logprobs > limits.max_logprobs) {
    return InvalidParam(request.logprobs_param,
                        absl::StrCat(request.logprobs_param, " must be in [0, ",
                                     limits.max_logprobs, "], got ", sp.top_logprobs));
  }
  if (static_cast<int64_t>(sp.stop_strings.size()) > limits.max_stop_strings) {
    return InvalidParam("stop", absl::StrCat("at most ", limits.max_stop_strings,
                                             " stop strings are allowed, got ",
                                             sp.stop_strings.size()));
  }
  for (size_t i = 0; i < sp.stop_strings.size(); ++i) {
    const std::string& s = sp.stop_strings[i];
    if (s.empty()) {
      return InvalidParam("stop", absl::StrCat("stop[", i, "] is empty"));
    }
    if (static_cast<int64_t>(s.size()) > limits.max_stop_string_bytes) {
      return InvalidParam("stop", absl::StrCat("stop[", i, "] is ", s.size(),
                                               " bytes; at most ", limits.max_stop_string_bytes,
                                               " are allowed"));
    }
    if (!base::IsValidUtf8(s)) {
      return InvalidParam("stop", absl::StrCat("stop[", i, "] is not valid UTF-8"));
    }
  }
  for (int32_t id : sp.stop_token_ids) {
    if (id < 0 || id >= tok.vocab_size()) {
      return InvalidParam("stop_token_ids",
                          absl::StrCat("stop token id ", id, " is outside the vocabulary [0, ",
                                       tok.vocab_size(), ")"));
    }
  }
  absl::Status s = sp.Validate();
  if (!s.ok()) {
    return SamplingError(s, request.logprobs_param);
  }
  out.sampling = sp;
  out.has_seed = request.has_seed;
  out.stop_strings = sp.stop_strings;
  if (out.chat) {
    for (std::string& eot : m.chat_template().end_of_turn_strings()) {
      out.stop_strings.push_back(std::move(eot));
    }
  }
  return out;
}

}  // namespace tandem::router
