#include "router/chat_template.h"

#include <algorithm>
#include <cctype>
#include <optional>

#include "absl/strings/ascii.h"
#include "absl/strings/match.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/strip.h"
#include "router/api_error.h"

namespace tandem::router {
namespace {

struct NamedFamily {
  const char* name;
  ChatTemplateFamily family;
};

constexpr NamedFamily kFamilies[] = {
    {"chatml", ChatTemplateFamily::kChatml},
    {"llama2", ChatTemplateFamily::kLlama2},
    {"llama2-sys", ChatTemplateFamily::kLlama2Sys},
    {"llama2-sys-bos", ChatTemplateFamily::kLlama2SysBos},
    {"llama2-sys-strip", ChatTemplateFamily::kLlama2SysStrip},
    {"mistral-v1", ChatTemplateFamily::kMistralV1},
    {"mistral-v3", ChatTemplateFamily::kMistralV3},
    {"mistral-v3-tekken", ChatTemplateFamily::kMistralV3Tekken},
    {"mistral-v7", ChatTemplateFamily::kMistralV7},
    {"llama3", ChatTemplateFamily::kLlama3},
    {"zephyr", ChatTemplateFamily::kZephyr},
    {"phi3", ChatTemplateFamily::kPhi3},
    {"gemma", ChatTemplateFamily::kGemma},
};

std::string Trim(absl::string_view s) { return std::string(absl::StripAsciiWhitespace(s)); }

constexpr absl::string_view kImStart = "<|im_start|>";
constexpr absl::string_view kImEnd = "<|im_end|>";

// The Jinja string literal whose opening quote is at tmpl[quote], its escapes
// decoded as Jinja (Python) does for the common ones; nullopt when it is not
// closed. `*end` (when given) is set past the closing quote.
std::optional<std::string> JinjaStringLiteral(absl::string_view tmpl, size_t quote,
                                              size_t* end = nullptr) {
  const char q = tmpl[quote];
  std::string out;
  for (size_t i = quote + 1; i < tmpl.size(); ++i) {
    const char c = tmpl[i];
    if (c == q) {
      if (end != nullptr) {
        *end = i + 1;
      }
      return out;
    }
    if (c != '\\' || i + 1 == tmpl.size()) {
      out += c;
      continue;
    }
    const char e = tmpl[++i];
    switch (e) {
      case 'n':
        out += '\n';
        break;
      case 't':
        out += '\t';
        break;
      case 'r':
        out += '\r';
        break;
      case '\\':
      case '\'':
      case '"':
        out += e;
        break;
      default:  // Python keeps unknown escapes as written
        out += '\\';
        out += e;
    }
  }
  return std::nullopt;
}

// The string literals inside the template's {{ }} and {% %} tags, in order.
std::vector<std::string> TagStringLiterals(absl::string_view tmpl) {
  std::vector<std::string> out;
  size_t i = 0;
  while (i < tmpl.size()) {
    const size_t expr = tmpl.find("{{", i);
    const size_t stmt = tmpl.find("{%", i);
    const size_t open = std::min(expr, stmt);
    if (open == absl::string_view::npos) {
      break;
    }
    const absl::string_view close = open == expr ? "}}" : "%}";
    for (i = open + 2; i < tmpl.size() && tmpl.substr(i, 2) != close;) {
      if (tmpl[i] != '\'' && tmpl[i] != '"') {
        ++i;
        continue;
      }
      std::optional<std::string> literal = JinjaStringLiteral(tmpl, i, &i);
      if (!literal.has_value()) {
        return out;
      }
      out.push_back(*std::move(literal));
    }
    i += 2;
  }
  return out;
}

// Qwen2.5's tools section: the literal that opens the list of tools and the
// one that closes it.
std::optional<ToolsSection> ReadToolsSection(absl::string_view tmpl) {
  if (!absl::StrContains(tmpl, "<tool_call>")) {
    return std::nullopt;
  }
  std::optional<std::string> preamble;
  std::optional<std::string> postamble;
  for (std::string& literal : TagStringLiterals(tmpl)) {
    if (!preamble.has_value() && absl::EndsWith(literal, "<tools>")) {
      preamble = std::move(literal);
    } else if (!postamble.has_value() && absl::StartsWith(literal, "\n</tools>")) {
      postamble = std::move(literal);
    }
  }
  if (!preamble.has_value() || !postamble.has_value()) {
    return std::nullopt;
  }
  return ToolsSection{*std::move(preamble), *std::move(postamble)};
}

}  // namespace

ChatTemplateExtras ReadChatmlExtras(absl::string_view tmpl) {
  ChatTemplateExtras extras;
  extras.tool_responses = absl::StrContains(tmpl, "<tool_response>");
  extras.tools = ReadToolsSection(tmpl);
  const std::string head = absl::StrCat(kImStart, "system\n");
  for (size_t at = tmpl.find(kImStart); at != absl::string_view::npos;
       at = tmpl.find(kImStart, at + 1)) {
    if (at == 0 || (tmpl[at - 1] != '\'' && tmpl[at - 1] != '"')) {
      continue;
    }
    std::optional<std::string> literal = JinjaStringLiteral(tmpl, at - 1);
    if (!literal.has_value()) {
      continue;
    }
    absl::string_view body = *literal;
    // The turn's newline may also follow in another literal.
    if (absl::EndsWith(body, "\n")) {
      body.remove_suffix(1);
    }
    if (absl::ConsumePrefix(&body, head) && absl::ConsumeSuffix(&body, kImEnd) &&
        !absl::StrContains(body, kImEnd) && !absl::StrContains(body, kImStart)) {
      extras.default_system = std::string(body);
      break;
    }
  }
  return extras;
}

absl::string_view ChatTemplateFamilyName(ChatTemplateFamily family) {
  for (const NamedFamily& f : kFamilies) {
    if (f.family == family) {
      return f.name;
    }
  }
  return "chatml";
}

absl::StatusOr<ChatTemplateFamily> DetectChatTemplate(absl::string_view tmpl) {
  for (const NamedFamily& f : kFamilies) {
    if (tmpl == f.name) {
      return f.family;
    }
  }
  auto has = [&](absl::string_view marker) { return absl::StrContains(tmpl, marker); };
  // Order matters: the checks follow llama.cpp's llm_chat_detect_template for
  // the families we render, so a template matches the family it would there.
  if (has("<|im_start|>")) {
    return ChatTemplateFamily::kChatml;
  }
  if (absl::StartsWith(tmpl, "mistral") || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) {
      return ChatTemplateFamily::kMistralV7;
    }
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]")) {
      if (has(" [INST]")) {
        return ChatTemplateFamily::kMistralV1;
      }
      if (has("\"[INST]\"")) {
        return ChatTemplateFamily::kMistralV3Tekken;
      }
      return ChatTemplateFamily::kMistralV3;
    }
    if (has("content.strip()")) {
      return ChatTemplateFamily::kLlama2SysStrip;
    }
    if (has("bos_token + '[INST]")) {
      return ChatTemplateFamily::kLlama2SysBos;
    }
    if (has("<<SYS>>")) {
      return ChatTemplateFamily::kLlama2Sys;
    }
    return ChatTemplateFamily::kLlama2;
  }
  if (has("<|assistant|>") && has("<|end|>")) {
    return ChatTemplateFamily::kPhi3;
  }
  if (has("<|user|>") && has("<|endoftext|>")) {
    return ChatTemplateFamily::kZephyr;
  }
  if (has("<start_of_turn>")) {
    return ChatTemplateFamily::kGemma;
  }
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
    return ChatTemplateFamily::kLlama3;
  }
  return absl::NotFoundError("chat template not recognised (supported families: chatml, "
                             "llama2, mistral, llama3, zephyr, phi3, gemma)");
}

absl::StatusOr<ChatTemplate> ChatTemplate::Resolve(absl::string_view override_name_or_text,
                                                   absl::string_view gguf_template,
                                                   std::string* warning) {
  if (!override_name_or_text.empty()) {
    absl::StatusOr<ChatTemplateFamily> f = DetectChatTemplate(override_name_or_text);
    if (!f.ok()) {
      return absl::InvalidArgumentError(
          absl::StrCat("chat_template: ", f.status().message()));
    }
    return FromText(*f, override_name_or_text);
  }
  if (gguf_template.empty()) {
    return ChatTemplate(ChatTemplateFamily::kChatml, /*fallback=*/true);
  }
  absl::StatusOr<ChatTemplateFamily> f = DetectChatTemplate(gguf_template);
  if (!f.ok()) {
    if (warning != nullptr) {
      *warning = absl::StrCat("tokenizer.chat_template: ", f.status().message(),
                              "; using chatml");
    }
    return ChatTemplate(ChatTemplateFamily::kChatml, /*fallback=*/true);
  }
  return FromText(*f, gguf_template);
}

ChatTemplate ChatTemplate::FromText(ChatTemplateFamily family, absl::string_view tmpl) {
  if (family != ChatTemplateFamily::kChatml) {
    return ChatTemplate(family);
  }
  return ChatTemplate(family, /*fallback=*/false, ReadChatmlExtras(tmpl));
}

std::vector<std::string> ChatTemplate::end_of_turn_strings() const {
  switch (family_) {
    case ChatTemplateFamily::kChatml:
      return {"<|im_end|>"};
    case ChatTemplateFamily::kLlama3:
      return {"<|eot_id|>"};
    case ChatTemplateFamily::kZephyr:
      return {"<|endoftext|>"};
    case ChatTemplateFamily::kPhi3:
      return {"<|end|>"};
    case ChatTemplateFamily::kGemma:
      return {"<end_of_turn>"};
    default:
      return {};  // llama2 / mistral turns end with </s>, the EOS token itself
  }
}

absl::StatusOr<std::string> ChatTemplate::Render(absl::Span<const ChatMessage> messages,
                                                 bool add_generation_prompt,
                                                 absl::Span<const std::string> tools) const {
  absl::StatusOr<RenderedPrompt> r = RenderWithRanges(messages, add_generation_prompt, tools);
  if (!r.ok()) {
    return r.status();
  }
  return std::move(r->text);
}

absl::StatusOr<RenderedPrompt> ChatTemplate::RenderWithRanges(
    absl::Span<const ChatMessage> messages, bool add_generation_prompt,
    absl::Span<const std::string> tools) const {
  if (messages.empty()) {
    return InvalidParam("messages", "messages must contain at least one message");
  }
  if (!tools.empty() && !extras_.tools.has_value()) {
    return InvalidParam("tools",
                        absl::StrCat("'tools' is not supported by this model: its chat template (",
                                     ChatTemplateFamilyName(family_),
                                     ") has no tools section (tool calling needs a Hermes-style "
                                     "template such as Qwen2.5's, with <tools> and <tool_call>)"));
  }
  std::vector<ChatMessage> chat;
  chat.reserve(messages.size());
  for (size_t i = 0; i < messages.size(); ++i) {
    ChatMessage m = messages[i];
    if (m.role == "developer") {
      m.role = "system";
    } else if (m.role == "tool" || m.role == "function") {
      m.role = extras_.tool_responses ? "tool" : "user";
    }
    if (m.role != "system" && m.role != "user" && m.role != "assistant" && m.role != "tool") {
      return InvalidParam(absl::StrCat("messages[", i, "].role"),
                          absl::StrCat("messages[", i, "].role: unknown role '", m.role,
                                       "' (want system, user, assistant, developer or tool)"));
    }
    chat.push_back(std::move(m));
  }

  RenderedPrompt rendered;
  std::string& out = rendered.text;
  constexpr size_t kUnwritten = static_cast<size_t>(-1);
  rendered.content_ranges.assign(chat.size(), engine::TextRange{kUnwritten, kUnwritten});
  // Appends message i's content (as the family writes it) and records where.
  auto content = [&](size_t i, absl::string_view text) {
    rendered.content_ranges[i] = {out.size(), out.size() + text.size()};
    out.append(text.data(), text.size());
  };
  switch (family_) {
    case ChatTemplateFamily::kChatml: {
      const bool opens_with_system = chat.front().role == "system";
      if (!tools.empty()) {
        // The system turn: its text (or the default), then the tools.
        absl::StrAppend(&out, kImStart, "system\n");
        if (opens_with_system) {
          content(0, chat.front().content);
        } else {
          out += extras_.default_system.value_or("");
        }
        out += extras_.tools->preamble;
        for (const std::string& tool : tools) {
          absl::StrAppend(&out, "\n", tool);
        }
        out += extras_.tools->postamble;
      } else if (extras_.default_system.has_value() && !opens_with_system) {
        absl::StrAppend(&out, kImStart, "system\n", *extras_.default_system, kImEnd, "\n");
      }
      for (size_t i = 0; i < chat.size(); ++i) {
        const ChatMessage& m = chat[i];
        if (i == 0 && opens_with_system && !tools.empty()) {
          continue;  // written with the tools
        }
        if (m.role == "assistant" && !m.tool_calls.empty() && extras_.tools.has_value()) {
          absl::StrAppend(&out, kImStart, "assistant");
          if (!m.content.empty()) {
            out += "\n";
            content(i, m.content);
          }
          for (const ToolCall& call : m.tool_calls) {
            absl::StrAppend(&out, "\n<tool_call>\n{\"name\": \"", call.name,
                            "\", \"arguments\": ", call.arguments, "}\n</tool_call>");
          }
          absl::StrAppend(&out, kImEnd, "\n");
          continue;
        }
        if (m.role != "tool") {
          absl::StrAppend(&out, kImStart, m.role, "\n");
          content(i, m.content);
          absl::StrAppend(&out, kImEnd, "\n");
          continue;
        }
        // Only with extras_.tool_responses (Qwen2.5's layout).
        if (i == 0 || chat[i - 1].role != "tool") {
          absl::StrAppend(&out, kImStart, "user");
        }
        out += "\n<tool_response>\n";
        content(i, m.content);
        out += "\n</tool_response>";
        if (i + 1 == chat.size() || chat[i + 1].role != "tool") {
          absl::StrAppend(&out, kImEnd, "\n");
        }
      }
      if (add_generation_prompt) {
        absl::StrAppend(&out, kImStart, "assistant\n");
      }
      break;
    }

    case ChatTemplateFamily::kLlama2:
    case ChatTemplateFamily::kLlama2Sys:
    case ChatTemplateFamily::kLlama2SysBos:
    case ChatTemplateFamily::kLlama2SysStrip: {
      const bool system_blocks = family_ != ChatTemplateFamily::kLlama2;
      const bool bos_in_history = family_ == ChatTemplateFamily::kLlama2SysBos;
      const bool strip = family_ == ChatTemplateFamily::kLlama2SysStrip;
      bool inside_turn = true;  // the first [INST] follows the tokenizer's BOS
      out += "[INST] ";
      for (size_t i = 0; i < chat.size(); ++i) {
        const ChatMessage& m = chat[i];
        const std::string text = strip ? Trim(m.content) : m.content;
        if (!inside_turn) {
          inside_turn = true;
          out += bos_in_history ? "<s>[INST] " : "[INST] ";
        }
        if (m.role == "system") {
          if (system_blocks) {
            out += "<<SYS>>\n";
            content(i, text);
            out += "\n<</SYS>>\n\n";
          } else {
            content(i, text);
            out += "\n";
          }
        } else if (m.role == "user") {
          content(i, text);
          out += " [/INST]";
        } else {
          content(i, text);
          out += "</s>";
          inside_turn = false;
        }
      }
      break;
    }

    case ChatTemplateFamily::kMistralV1:
    case ChatTemplateFamily::kMistralV3:
    case ChatTemplateFamily::kMistralV3Tekken: {
      const std::string lead = family_ == ChatTemplateFamily::kMistralV1 ? " " : "";
      const std::string trail = family_ == ChatTemplateFamily::kMistralV3Tekken ? "" : " ";
      const bool trim_assistant = family_ == ChatTemplateFamily::kMistralV3;
      bool inside_turn = false;
      for (size_t i = 0; i < chat.size(); ++i) {
        const ChatMessage& m = chat[i];
        if (!inside_turn) {
          absl::StrAppend(&out, lead, "[INST]", trail);
          inside_turn = true;
        }
        if (m.role == "system") {
          content(i, m.content);
          out += "\n\n";
        } else if (m.role == "user") {
          content(i, m.content);
          absl::StrAppend(&out, lead, "[/INST]");
        } else {
          out += trail;
          content(i, trim_assistant ? Trim(m.content) : m.content);
          out += "</s>";
          inside_turn = false;
        }
      }
      break;
    }

    case ChatTemplateFamily::kMistralV7:
      for (size_t i = 0; i < chat.size(); ++i) {
        const ChatMessage& m = chat[i];
        if (m.role == "system") {
          out += "[SYSTEM_PROMPT] ";
          content(i, m.content);
          out += "[/SYSTEM_PROMPT]";
        } else if (m.role == "user") {
          out += "[INST] ";
          content(i, m.content);
          out += "[/INST]";
        } else {
          out += " ";
          content(i, m.content);
          out += "</s>";
        }
      }
      break;

    case ChatTemplateFamily::kLlama3:
      for (size_t i = 0; i < chat.size(); ++i) {
        absl::StrAppend(&out, "<|start_header_id|>", chat[i].role, "<|end_header_id|>\n\n");
        content(i, Trim(chat[i].content));
        out += "<|eot_id|>";
      }
      if (add_generation_prompt) {
        out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      }
      break;

    case ChatTemplateFamily::kZephyr:
    case ChatTemplateFamily::kPhi3: {
      const absl::string_view end =
          family_ == ChatTemplateFamily::kZephyr ? "<|endoftext|>\n" : "<|end|>\n";
      for (size_t i = 0; i < chat.size(); ++i) {
        absl::StrAppend(&out, "<|", chat[i].role, "|>\n");
        content(i, chat[i].content);
        out.append(end.data(), end.size());
      }
      if (add_generation_prompt) {
        out += "<|assistant|>\n";
      }
      break;
    }

    case ChatTemplateFamily::kGemma: {
      // Gemma has no system role: the system text opens the next user turn.
      std::string system;               // the pending system messages' text, trimmed
      std::vector<size_t> system_msgs;  // and their indices
      for (size_t i = 0; i < chat.size(); ++i) {
        const ChatMessage& m = chat[i];
        if (m.role == "system") {
          system += Trim(m.content);
          system_msgs.push_back(i);
          continue;
        }
        const std::string role = m.role == "assistant" ? "model" : m.role;
        absl::StrAppend(&out, "<start_of_turn>", role, "\n");
        if (!system.empty() && role != "model") {
          for (size_t s : system_msgs) {
            content(s, Trim(chat[s].content));
          }
          out += "\n\n";
          system.clear();
          system_msgs.clear();
        }
        content(i, Trim(m.content));
        out += "<end_of_turn>\n";
      }
      if (add_generation_prompt) {
        out += "<start_of_turn>model\n";
      }
      break;
    }
  }
  for (engine::TextRange& r : rendered.content_ranges) {
    if (r.begin == kUnwritten) {
      r = {out.size(), out.size()};
    }
  }
  return rendered;
}

}  // namespace tandem::router
