#include "router/tool_calls.h"

#include <algorithm>

#include "absl/algorithm/container.h"
#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"

namespace tandem::router {
namespace {

using ojson = nlohmann::ordered_json;

constexpr absl::string_view kOpen = "<tool_call>";
constexpr absl::string_view kClose = "</tool_call>";
constexpr absl::string_view kFence = "```json";

void AppendPython(const ojson& v, std::string* out) {
  switch (v.type()) {
    case ojson::value_t::object: {
      out->push_back('{');
      bool first = true;
      for (auto it = v.begin(); it != v.end(); ++it) {
        absl::StrAppend(out, first ? "" : ", ", ojson(it.key()).dump(), ": ");
        AppendPython(it.value(), out);
        first = false;
      }
      out->push_back('}');
      return;
    }
    case ojson::value_t::array: {
      out->push_back('[');
      for (size_t i = 0; i < v.size(); ++i) {
        if (i > 0) {
          *out += ", ";
        }
        AppendPython(v[i], out);
      }
      out->push_back(']');
      return;
    }
    default:
      // Scalars: nlohmann escapes strings as json.dumps does with
      // ensure_ascii=False (\" \\ \b \f \n \r \t, other controls \u00XX) and
      // writes doubles in their shortest round-trip form, as Python's repr.
      *out += v.dump(-1, ' ', /*ensure_ascii=*/false, ojson::error_handler_t::replace);
  }
}

// One tool call's JSON ({"name": "...", "arguments": ...}), as vLLM's hermes
// parser reads it; nullopt when it is not one.
std::optional<ToolCall> ParseCallJson(absl::string_view text) {
  const ojson j = ojson::parse(text.begin(), text.end(), nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded() || !j.is_object()) {
    return std::nullopt;
  }
  auto name = j.find("name");
  auto args = j.find("arguments");
  if (name == j.end() || !name->is_string() || args == j.end()) {
    return std::nullopt;
  }
  return ToolCall{name->get<std::string>(), PythonJsonDumps(*args)};
}

// llama.cpp's addition: the whole output is one call, bare or in a ```json
// fence, naming a tool of the request.
std::optional<ToolCall> ParseBareCall(absl::string_view output,
                                      absl::Span<const std::string> tool_names) {
  absl::string_view body = absl::StripAsciiWhitespace(output);
  if (absl::ConsumePrefix(&body, kFence) && !absl::ConsumeSuffix(&body, "```")) {
    return std::nullopt;
  }
  std::optional<ToolCall> call = ParseCallJson(body);
  if (!call.has_value() || absl::c_find(tool_names, call->name) == tool_names.end()) {
    return std::nullopt;
  }
  return call;
}

// Whether `text`, the output so far, may still become a bare call.
bool MayBeBareCall(absl::string_view text) {
  absl::string_view t = absl::StripLeadingAsciiWhitespace(text);
  return absl::StartsWith(kFence, t) || absl::StartsWith(t, kFence) || absl::StartsWith(t, "{");
}

// The next <tool_call> block at or after `from`: its body (up to
// </tool_call>, or to the end when unterminated) and where it ends.
struct Block {
  absl::string_view body;
  bool closed = false;
  size_t end = 0;  // past </tool_call>, or text.size()
};

std::optional<Block> NextBlock(absl::string_view text, size_t from) {
  const size_t open = text.find(kOpen, from);
  if (open == absl::string_view::npos) {
    return std::nullopt;
  }
  const size_t body = open + kOpen.size();
  const size_t close = text.find(kClose, body);
  if (close == absl::string_view::npos) {
    return Block{text.substr(body), false, text.size()};
  }
  return Block{text.substr(body, close - body), true, close + kClose.size()};
}

// The length of the longest suffix of `text` that begins `marker`.
size_t PartialMarkerSuffix(absl::string_view text, absl::string_view marker) {
  for (size_t n = std::min(text.size(), marker.size() - 1); n > 0; --n) {
    if (absl::EndsWith(text, marker.substr(0, n))) {
      return n;
    }
  }
  return 0;
}

}  // namespace

std::string PythonJsonDumps(const nlohmann::ordered_json& value) {
  std::string out;
  AppendPython(value, &out);
  return out;
}

ParsedToolCalls ParseHermesToolCalls(absl::string_view output,
                                     absl::Span<const std::string> tool_names) {
  ParsedToolCalls parsed;
  const size_t first = output.find(kOpen);
  if (first == absl::string_view::npos) {
    if (std::optional<ToolCall> call = ParseBareCall(output, tool_names)) {
      parsed.calls.push_back(*std::move(call));
    } else {
      parsed.content = std::string(output);
    }
    return parsed;
  }
  // <tool_call>(.*?)</tool_call>|<tool_call>(.*), as vLLM's findall.
  for (std::optional<Block> b = NextBlock(output, first); b.has_value();
       b = NextBlock(output, b->end)) {
    std::optional<ToolCall> call = ParseCallJson(b->body);
    if (!call.has_value()) {
      return ParsedToolCalls{{}, std::string(output)};  // malformed: all content
    }
    parsed.calls.push_back(*std::move(call));
  }
  if (first > 0) {
    parsed.content = std::string(output.substr(0, first));
  }
  return parsed;
}

HermesToolStream::Update HermesToolStream::Add(absl::string_view delta) {
  text_.append(delta.data(), delta.size());
  return Advance(/*final=*/false);
}

HermesToolStream::Update HermesToolStream::Finish() { return Advance(/*final=*/true); }

HermesToolStream::Update HermesToolStream::Advance(bool final) {
  Update u;
  const absl::string_view text = text_;
  if (stage_ == Stage::kText) {
    const size_t open = text.find(kOpen);
    if (open == absl::string_view::npos) {
      if (final) {
        std::optional<ToolCall> call = sent_ == 0 ? ParseBareCall(text, tool_names_) : std::nullopt;
        if (call.has_value()) {
          u.calls.push_back(*std::move(call));
          ++calls_sent_;
        } else {
          u.content = std::string(text.substr(sent_));
        }
        sent_ = text.size();
        return u;
      }
      if (sent_ == 0 && MayBeBareCall(text)) {
        return u;  // hold it all until the end
      }
      const size_t safe = text.size() - PartialMarkerSuffix(text, kOpen);
      if (safe > sent_) {
        u.content = std::string(text.substr(sent_, safe - sent_));
        sent_ = safe;
      }
      return u;
    }
    u.content = std::string(text.substr(sent_, open - sent_));
    sent_ = open;
    stage_ = Stage::kCalls;
  }
  if (stage_ == Stage::kCalls) {
    // Each complete block (and at the end an unterminated last one); text
    // between and after blocks is dropped, as vLLM does.
    for (std::optional<Block> b = NextBlock(text, sent_); b.has_value();
         b = NextBlock(text, sent_)) {
      if (!b->closed && !final) {
        return u;
      }
      std::optional<ToolCall> call = ParseCallJson(b->body);
      if (!call.has_value()) {
        stage_ = Stage::kFailed;
        break;
      }
      u.calls.push_back(*std::move(call));
      ++calls_sent_;
      sent_ = b->end;
    }
    if (stage_ == Stage::kCalls) {
      if (final) {
        sent_ = text.size();
      }
      return u;
    }
  }
  // kFailed: a malformed block; it and everything after it is content.
  u.content += std::string(text.substr(sent_));
  sent_ = text.size();
  return u;
}

}  // namespace tandem::router
