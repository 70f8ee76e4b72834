#include "router/openai_request.h"

#include <algorithm>
#include <cmath>
#include <exception>
#include <limits>

#include "absl/strings/str_cat.h"
#include "nlohmann/json.hpp"
#include "router/api_error.h"
#include "router/tool_calls.h"

namespace tandem::router {
namespace {

using json = nlohmann::json;
using ojson = nlohmann::ordered_json;

absl::Status TypeError(absl::string_view param, absl::string_view want) {
  return InvalidParam(param, absl::StrCat("'", param, "' must be ", want));
}

const json* Field(const json& obj, const char* key) {
  auto it = obj.find(key);
  if (it == obj.end() || it->is_null()) {
    return nullptr;
  }
  return &*it;
}

absl::Status ReadInt64(const json& obj, const char* key, std::optional<int64_t>* out) {
  const json* v = Field(obj, key);
  if (v == nullptr) {
    return absl::OkStatus();
  }
  if (v->is_number_integer()) {
    *out = v->is_number_unsigned()
               ? static_cast<int64_t>(std::min<uint64_t>(v->get<uint64_t>(), INT64_MAX))
               : v->get<int64_t>();
    return absl::OkStatus();
  }
  if (v->is_number_float()) {
    const double d = v->get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::fabs(d) < 9e18) {
      *out = static_cast<int64_t>(d);
      return absl::OkStatus();
    }
  }
  return TypeError(key, "an integer");
}

absl::Status ReadInt32(const json& obj, const char* key, std::optional<int32_t>* out) {
  std::optional<int64_t> v;
  absl::Status s = ReadInt64(obj, key, &v);
  if (!s.ok() || !v.has_value()) {
    return s;
  }
  // Out-of-range values keep their sign so the limit checks name them.
  *out = static_cast<int32_t>(std::clamp<int64_t>(*v, INT32_MIN, INT32_MAX));
  return absl::OkStatus();
}

absl::Status ReadFloat(const json& obj, const char* key, std::optional<float>* out) {
  const json* v = Field(obj, key);
  if (v == nullptr) {
    return absl::OkStatus();
  }
  if (!v->is_number()) {
    return TypeError(key, "a number");
  }
  *out = static_cast<float>(v->get<double>());
  return absl::OkStatus();
}

absl::Status ReadBool(const json& obj, const char* key, std::optional<bool>* out) {
  const json* v = Field(obj, key);
  if (v == nullptr) {
    return absl::OkStatus();
  }
  if (!v->is_boolean()) {
    return TypeError(key, "a boolean");
  }
  *out = v->get<bool>();
  return absl::OkStatus();
}

absl::Status ReadString(const json& obj, const char* key, std::optional<std::string>* out) {
  const json* v = Field(obj, key);
  if (v == nullptr) {
    return absl::OkStatus();
  }
  if (!v->is_string()) {
    return TypeError(key, "a string");
  }
  *out = v->get<std::string>();
  return absl::OkStatus();
}

absl::Status Unsupported(absl::string_view param, absl::string_view why) {
  return InvalidParam(param, absl::StrCat("'", param, "' is not supported", why));
}

#define TANDEM_RETURN_IF_ERROR(expr) \
  do {                               \
    absl::Status s_ = (expr);        \
    if (!s_.ok()) return s_;         \
  } while (false)

absl::Status ParseTokenIds(const json& arr, const char* param, std::vector<int32_t>* out) {
  for (size_t i = 0; i < arr.size(); ++i) {
    const json& e = arr[i];
    if (!e.is_number_integer()) {
      return InvalidParam(param, absl::StrCat("'", param, "'[", i, "] must be an integer token id"));
    }
    const int64_t v = e.is_number_unsigned()
                          ? static_cast<int64_t>(std::min<uint64_t>(e.get<uint64_t>(), INT64_MAX))
                          : e.get<int64_t>();
    if (v < INT32_MIN || v > INT32_MAX) {
      return InvalidParam(param, absl::StrCat("prompt token id ", v, " at index ", i,
                                              " is outside the vocabulary"),
                          "invalid_token_id");
    }
    out->push_back(static_cast<int32_t>(v));
  }
  return absl::OkStatus();
}

absl::Status ParsePrompt(const json& body, GenerationRequest* g) {
  const json* p = Field(body, "prompt");
  if (p == nullptr) {
    return InvalidParam("prompt", "'prompt' is required");
  }
  if (p->is_string()) {
    g->prompt_text = p->get<std::string>();
    return absl::OkStatus();
  }
  if (!p->is_array()) {
    return TypeError("prompt", "a string, an array of token ids, or a one-element array of those");
  }
  if (p->empty()) {
    return InvalidParam("prompt", "'prompt' must not be empty");
  }
  bool all_ints = true;
  for (const json& e : *p) {
    all_ints = all_ints && e.is_number();
  }
  if (all_ints) {
    std::vector<int32_t> ids;
    TANDEM_RETURN_IF_ERROR(ParseTokenIds(*p, "prompt", &ids));
    g->prompt_ids = std::move(ids);
    return absl::OkStatus();
  }
  if (p->size() > 1) {
    return InvalidParam("prompt", "batched prompts are not supported: send one prompt per request");
  }
  const json& only = (*p)[0];
  if (only.is_string()) {
    g->prompt_text = only.get<std::string>();
    return absl::OkStatus();
  }
  if (only.is_array()) {
    if (only.empty()) {
      return InvalidParam("prompt", "'prompt' must not be empty");
    }
    std::vector<int32_t> ids;
    TANDEM_RETURN_IF_ERROR(ParseTokenIds(only, "prompt", &ids));
    g->prompt_ids = std::move(ids);
    return absl::OkStatus();
  }
  return TypeError("prompt", "a string, an array of token ids, or a one-element array of those");
}

// The widest object in `v` (members), so a hostile body cannot make the
// ordered parse below quadratic: ordered_json looks keys up linearly.
size_t MaxObjectWidth(const json& v) {
  size_t widest = v.is_object() ? v.size() : 0;
  if (v.is_structured()) {
    for (const json& e : v) {
      widest = std::max(widest, MaxObjectWidth(e));
    }
  }
  return widest;
}

constexpr size_t kMaxOrderedObjectWidth = 1024;

absl::Status CheckOrderedWidth(const json& v, absl::string_view param) {
  if (MaxObjectWidth(v) > kMaxOrderedObjectWidth) {
    return InvalidParam(param, absl::StrCat("'", param, "' has an object with more than ",
                                            kMaxOrderedObjectWidth, " members"));
  }
  return absl::OkStatus();
}

// `text` as JSON with its keys in their order (tool definitions and call
// arguments reach the model as the client wrote them, as in transformers).
absl::StatusOr<ojson> ParseOrdered(absl::string_view text, absl::string_view param) {
  const json sorted = json::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (sorted.is_discarded()) {
    return InvalidParam(param, absl::StrCat("'", param, "' is not valid JSON"));
  }
  TANDEM_RETURN_IF_ERROR(CheckOrderedWidth(sorted, param));
  return ojson::parse(text.begin(), text.end());
}

// An assistant message's tool_calls: [{id, type: "function", function: {name,
// arguments}}]. `arguments` is a JSON string (OpenAI) or object; the template
// writes it as a JSON value (vLLM parses the string the same way).
absl::Status ParseMessageToolCalls(const json& message, const std::string& at,
                                   std::vector<ToolCall>* out) {
  auto calls = message.find("tool_calls");
  if (calls == message.end() || calls->is_null()) {
    return absl::OkStatus();
  }
  const std::string param = at + ".tool_calls";
  if (!calls->is_array()) {
    return TypeError(param, "an array of tool calls");
  }
  for (size_t k = 0; k < calls->size(); ++k) {
    const json& c = (*calls)[k];
    const std::string ck = absl::StrCat(param, "[", k, "]");
    auto fn = c.is_object() ? c.find("function") : c.end();
    if (!c.is_object() || fn == c.end() || !fn->is_object()) {
      return InvalidParam(ck, absl::StrCat("'", ck,
                                           "' must be {\"type\": \"function\", "
                                           "\"function\": {\"name\", \"arguments\"}}"));
    }
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string()) {
      return TypeError(ck + ".function.name", "a string");
    }
    ToolCall call{name->get<std::string>(), "{}"};
    auto args = fn->find("arguments");
    if (args != fn->end() && args->is_string()) {
      const std::string param_args = ck + ".function.arguments";
      absl::StatusOr<ojson> parsed = ParseOrdered(args->get<std::string>(), param_args);
      if (!parsed.ok()) {
        return parsed.status();
      }
      call.arguments = PythonJsonDumps(*parsed);
    } else if (args != fn->end() && !args->is_null()) {
      // An object sent as such: its keys come sorted (the body's parser);
      // OpenAI clients send a string, whose order is kept.
      call.arguments = PythonJsonDumps(ojson::parse(args->dump()));
    }
    out->push_back(std::move(call));
  }
  return absl::OkStatus();
}

// tools: [{"type": "function", "function": {"name", "description"?,
// "parameters"?}}], each kept as the template's tojson writes it (keys in the
// client's order), and tool_choice. vLLM's rules: tool_choice defaults to
// "auto" with tools; "none" shows the tools but parses no calls; "required"
// and a named function need guided decoding, which we do not have.
absl::Status ParseTools(const json& body, absl::string_view body_text, OpenAiRequest* r) {
  auto tools = body.find("tools");
  auto choice = body.find("tool_choice");
  const bool has_tools = tools != body.end() && !tools->is_null();
  std::string mode = has_tools && !tools->empty() ? "auto" : "none";
  if (choice != body.end() && !choice->is_null()) {
    mode = choice->is_string() ? choice->get<std::string>() : "a named function";
    if (!choice->is_string() || mode == "required") {
      return Unsupported("tool_choice",
                         absl::StrCat(" as ", mode,
                                      ": only \"auto\" and \"none\" (forcing a call needs "
                                      "guided decoding, which this server does not have)"));
    }
    if (mode != "auto" && mode != "none") {
      return InvalidParam("tool_choice", absl::StrCat("'tool_choice' must be \"auto\" or "
                                                      "\"none\", got \"",
                                                      mode, "\""));
    }
    if (mode == "auto" && (!has_tools || tools->empty())) {
      return InvalidParam("tool_choice", "'tool_choice' \"auto\" needs 'tools'");
    }
  }
  if (!has_tools) {
    return absl::OkStatus();
  }
  if (!tools->is_array()) {
    return TypeError("tools", "an array of {\"type\": \"function\", \"function\": {...}}");
  }
  TANDEM_RETURN_IF_ERROR(CheckOrderedWidth(*tools, "tools"));
  // The body again, in order, keeping only "tools".
  const ojson ordered = ojson::parse(
      body_text.begin(), body_text.end(),
      [](int depth, ojson::parse_event_t event, ojson& parsed) {
        return !(depth == 1 && event == ojson::parse_event_t::key && parsed != "tools");
      },
      /*allow_exceptions=*/false);
  if (!ordered.is_object() || !ordered.contains("tools") ||
      ordered["tools"].size() != tools->size()) {
    return absl::InternalError("tools: the ordered parse disagrees with the body");
  }
  for (size_t i = 0; i < tools->size(); ++i) {
    const ojson& t = ordered["tools"][i];
    const std::string at = absl::StrCat("tools[", i, "]");
    auto type = t.is_object() ? t.find("type") : t.end();
    auto fn = t.is_object() ? t.find("function") : t.end();
    if (type == t.end() || *type != "function" || fn == t.end() || !fn->is_object()) {
      return InvalidParam(at, absl::StrCat("'", at,
                                           "' must be {\"type\": \"function\", "
                                           "\"function\": {\"name\": ...}}"));
    }
    auto name = fn->find("name");
    if (name == fn->end() || !name->is_string() || name->get<std::string>().empty()) {
      return InvalidParam(at + ".function.name",
                          absl::StrCat("'", at, ".function.name' must be a non-empty string"));
    }
    r->gen.tools.push_back(PythonJsonDumps(t));
    r->tool_names.push_back(name->get<std::string>());
  }
  r->parse_tool_calls = mode == "auto" && !r->tool_names.empty();
  return absl::OkStatus();
}

absl::Status ParseMessages(const json& body, GenerationRequest* g) {
  const json* m = Field(body, "messages");
  if (m == nullptr) {
    return InvalidParam("messages", "'messages' is required");
  }
  if (!m->is_array()) {
    return TypeError("messages", "an array of {role, content} objects");
  }
  if (m->empty()) {
    return InvalidParam("messages", "'messages' must contain at least one message");
  }
  std::vector<ChatMessage> out;
  for (size_t i = 0; i < m->size(); ++i) {
    const json& e = (*m)[i];
    const std::string at = absl::StrCat("messages[", i, "]");
    if (!e.is_object()) {
      return InvalidParam(at, absl::StrCat("'", at, "' must be an object with role and content"));
    }
    ChatMessage msg;
    const json* role = Field(e, "role");
    if (role == nullptr || !role->is_string()) {
      return InvalidParam(at + ".role", absl::StrCat("'", at, ".role' must be a string"));
    }
    msg.role = role->get<std::string>();
    const json* content = Field(e, "content");
    if (content == nullptr) {
      // null content (an assistant turn with tool calls) renders as empty text
    } else if (content->is_string()) {
      msg.content = content->get<std::string>();
    } else if (content->is_array()) {
      for (size_t k = 0; k < content->size(); ++k) {
        const json& part = (*content)[k];
        const json* type = part.is_object() ? Field(part, "type") : nullptr;
        const json* text = part.is_object() ? Field(part, "text") : nullptr;
        if (type == nullptr || !type->is_string() || type->get<std::string>() != "text" ||
            text == nullptr || !text->is_string()) {
          return InvalidParam(absl::StrCat(at, ".content[", k, "]"),
                              absl::StrCat("'", at, ".content[", k,
                                           "]': only {\"type\": \"text\", \"text\": ...} parts "
                                           "are supported"));
        }
        msg.content += text->get<std::string>();
      }
    } else {
      return InvalidParam(at + ".content",
                          absl::StrCat("'", at, ".content' must be a string or an array of "
                                                "text parts"));
    }
    TANDEM_RETURN_IF_ERROR(ParseMessageToolCalls(e, at, &msg.tool_calls));
    out.push_back(std::move(msg));
  }
  g->messages = std::move(out);
  return absl::OkStatus();
}

absl::Status ParseStop(const json& body, std::vector<std::string>* out) {
  const json* s = Field(body, "stop");
  if (s == nullptr) {
    return absl::OkStatus();
  }
  if (s->is_string()) {
    out->push_back(s->get<std::string>());
    return absl::OkStatus();
  }
  if (!s->is_array()) {
    return TypeError("stop", "a string or an array of strings");
  }
  for (const json& e : *s) {
    if (!e.is_string()) {
      return TypeError("stop", "a string or an array of strings");
    }
    out->push_back(e.get<std::string>());
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<OpenAiRequest> ParseOpenAiRequest(OpenAiEndpoint endpoint,
                                                 absl::string_view body_text) {
  OpenAiRequest r;
  r.endpoint = endpoint;
  json body;
  try {
    body = json::parse(body_text.begin(), body_text.end());
  } catch (const json::parse_error& e) {
    // e.what() names the byte position ("parse error at line 1, column 9: ...").
    return InvalidParam("", absl::StrCat("Invalid JSON body: ", e.what()), "invalid_json");
  } catch (const std::exception& e) {
    return InvalidParam("", absl::StrCat("Invalid JSON body: ", e.what()), "invalid_json");
  }
  if (!body.is_object()) {
    return InvalidParam("", "the request body must be a JSON object", "invalid_json");
  }
  GenerationRequest& g = r.gen;
  g.sampling.temperature = 1.0f;  // OpenAI's default

  std::optional<std::string> model;
  TANDEM_RETURN_IF_ERROR(ReadString(body, "model", &model));
  g.model = model.value_or("");

  if (endpoint == OpenAiEndpoint::kCompletions) {
    TANDEM_RETURN_IF_ERROR(ParsePrompt(body, &g));
    std::optional<bool> echo;
    TANDEM_RETURN_IF_ERROR(ReadBool(body, "echo", &echo));
    if (echo.value_or(false)) {
      return Unsupported("echo", "");
    }
    std::optional<std::string> suffix;
    TANDEM_RETURN_IF_ERROR(ReadString(body, "suffix", &suffix));
    if (suffix.has_value() && !suffix->empty()) {
      return Unsupported("suffix", "");
    }
    std::optional<int32_t> logprobs;
    TANDEM_RETURN_IF_ERROR(ReadInt32(body, "logprobs", &logprobs));
    if (logprobs.has_value()) {
      if (*logprobs < 0) {
        return InvalidParam("logprobs", absl::StrCat("'logprobs' must be >= 0, got ", *logprobs));
      }
      r.completion_logprobs = *logprobs;
      g.sampling.logprobs = true;
      g.sampling.top_logprobs = *logprobs;
    }
    g.max_tokens = 16;  // OpenAI's default for completions
  } else {
    TANDEM_RETURN_IF_ERROR(ParseMessages(body, &g));
    std::optional<bool> logprobs;
    TANDEM_RETURN_IF_ERROR(ReadBool(body, "logprobs", &logprobs));
    std::optional<int32_t> top;
    TANDEM_RETURN_IF_ERROR(ReadInt32(body, "top_logprobs", &top));
    r.chat_logprobs = logprobs.value_or(false);
    if (top.has_value()) {
      if (!r.chat_logprobs) {
        return InvalidParam("top_logprobs", "'top_logprobs' requires 'logprobs' to be true");
      }
      if (*top < 0) {
        return InvalidParam("top_logprobs",
                            absl::StrCat("'top_logprobs' must be >= 0, got ", *top));
      }
      g.sampling.top_logprobs = *top;
    }
    g.sampling.logprobs = r.chat_logprobs;
    g.logprobs_param = "top_logprobs";
    TANDEM_RETURN_IF_ERROR(ParseTools(body, body_text, &r));
    const json* fmt = Field(body, "response_format");
    if (fmt != nullptr) {
      const json* type = fmt->is_object() ? Field(*fmt, "type") : nullptr;
      if (type == nullptr || !type->is_string() || type->get<std::string>() != "text") {
        return Unsupported("response_format", ": only {\"type\": \"text\"}");
      }
    }
    std::optional<int32_t> mct;
    TANDEM_RETURN_IF_ERROR(ReadInt32(body, "max_completion_tokens", &mct));
    if (mct.has_value()) {
      g.max_tokens = *mct;
    }
  }

  std::optional<int32_t> max_tokens;
  TANDEM_RETURN_IF_ERROR(ReadInt32(body, "max_tokens", &max_tokens));
  if (max_tokens.has_value()) {
    g.max_tokens = *max_tokens;
  }
  std::optional<int32_t> n;
  TANDEM_RETURN_IF_ERROR(ReadInt32(body, "n", &n));
  g.n = n.value_or(1);
  std::optional<int32_t> best_of;
  TANDEM_RETURN_IF_ERROR(ReadInt32(body, "best_of", &best_of));
  if (best_of.has_value() && *best_of != g.n) {
    return Unsupported("best_of", " (other than best_of == n)");
  }

  std::optional<float> f;
  TANDEM_RETURN_IF_ERROR(ReadFloat(body, "temperature", &f));
  if (f.has_value()) {
    g.sampling.temperature = *f;
  }
  f.reset();
  TANDEM_RETURN_IF_ERROR(ReadFloat(body, "top_p", &f));
  if (f.has_value()) {
    g.sampling.top_p = *f;
  }
  f.reset();
  TANDEM_RETURN_IF_ERROR(ReadFloat(body, "min_p", &f));
  if (f.has_value()) {
    g.sampling.min_p = *f;
  }
  f.reset();
  TANDEM_RETURN_IF_ERROR(ReadFloat(body, "repetition_penalty", &f));
  if (f.has_value()) {
    g.sampling.repetition_penalty = *f;
  }
  for (const char* penalty : {"presence_penalty", "frequency_penalty"}) {
    f.reset();
    TANDEM_RETURN_IF_ERROR(ReadFloat(body, penalty, &f));
    if (f.has_value() && *f != 0.0f) {
      return Unsupported(penalty, " (use repetition_penalty)");
    }
  }
  std::optional<int32_t> top_k;
  TANDEM_RETURN_IF_ERROR(ReadInt32(body, "top_k", &top_k));
  if (top_k.has_value()) {
    g.sampling.top_k = *top_k == -1 ? 0 : *top_k;  // vLLM spells "off" as -1
  }
  std::optional<int64_t> seed;
  TANDEM_RETURN_IF_ERROR(ReadInt64(body, "seed", &seed));
  if (seed.has_value()) {
    g.sampling.seed = static_cast<uint64_t>(*seed);
    g.has_seed = true;
  }
  std::optional<bool> ignore_eos;
  TANDEM_RETURN_IF_ERROR(ReadBool(body, "ignore_eos", &ignore_eos));
  g.sampling.ignore_eos = ignore_eos.value_or(false);
  TANDEM_RETURN_IF_ERROR(ParseStop(body, &g.sampling.stop_strings));
  const json* stop_ids = Field(body, "stop_token_ids");
  if (stop_ids != nullptr) {
    if (!stop_ids->is_array()) {
      return TypeError("stop_token_ids", "an array of token ids");
    }
    TANDEM_RETURN_IF_ERROR(ParseTokenIds(*stop_ids, "stop_token_ids", &g.sampling.stop_token_ids));
  }
  const json* bias = Field(body, "logit_bias");
  if (bias != nullptr && !(bias->is_object() && bias->empty())) {
    return Unsupported("logit_bias", "");
  }

  std::optional<bool> stream;
  TANDEM_RETURN_IF_ERROR(ReadBool(body, "stream", &stream));
  r.stream = stream.value_or(false);
  const json* so = Field(body, "stream_options");
  if (so != nullptr) {
    if (!r.stream) {
      return InvalidParam("stream_options",
                          "'stream_options' is only allowed when 'stream' is true");
    }
    if (!so->is_object()) {
      return TypeError("stream_options", "an object");
    }
    std::optional<bool> include_usage;
    absl::Status s = ReadBool(*so, "include_usage", &include_usage);
    if (!s.ok()) {
      return TypeError("stream_options.include_usage", "a boolean");
    }
    r.include_usage = include_usage.value_or(false);
  }
  std::optional<std::string> user;
  TANDEM_RETURN_IF_ERROR(ReadString(body, "user", &user));
  g.tenant = user.value_or("");
  return r;
}

}  // namespace tandem::router
