#pragma once
// Chat templates for /v1/chat/completions. Like llama.cpp's
// llm_chat_detect_template we do not run Jinja: a model's
// tokenizer.chat_template is recognised by the markers it contains and
// rendered by a built-in formatter for its family. Models without a template
// (stories260K) get chatml. Where a template does more than its family's
// plain format and transformers' apply_chat_template would show it (a default
// system prompt, Qwen2.5's tool results), the text is read for that too
// (ChatTemplateExtras), so the prompt equals transformers' rendering; checked
// on SmolLM2's and Qwen2.5's own templates by tests/router/chat_template_test.cc
// against tests/data/chat_template/reference.json.
//
// Immutable; any thread.

#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"
#include "common/engine/tokenizer/tokenizer.h"
#include "router/tool_calls.h"

namespace tandem::router {

enum class ChatTemplateFamily {
  kChatml,          // <|im_start|>role\n...<|im_end|>\n
  kLlama2,          // [INST] ... [/INST] (system folded into the first turn)
  kLlama2Sys,       // with <<SYS>> blocks
  kLlama2SysBos,    // with <s> before every later [INST]
  kLlama2SysStrip,  // with content.strip()
  kMistralV1,       // " [INST] ... [/INST]"
  kMistralV3,       // "[INST] ... [/INST]", assistant text trimmed
  kMistralV3Tekken, // "[INST]...[/INST]"
  kMistralV7,       // [SYSTEM_PROMPT] ... [/SYSTEM_PROMPT][INST] ... [/INST]
  kLlama3,          // <|start_header_id|>role<|end_header_id|>\n\n...<|eot_id|>
  kZephyr,          // <|role|>\n...<|endoftext|>\n
  kPhi3,            // <|role|>\n...<|end|>\n
  kGemma,           // <start_of_turn>user|model\n...<end_of_turn>\n
};

// "chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip",
// "mistral-v1", "mistral-v3", "mistral-v3-tekken", "mistral-v7", "llama3",
// "zephyr", "phi3", "gemma" (llama.cpp's names).
absl::string_view ChatTemplateFamilyName(ChatTemplateFamily family);

// A family name, or a Jinja template text recognised by its markers.
// NotFound when nothing matches.
absl::StatusOr<ChatTemplateFamily> DetectChatTemplate(absl::string_view tmpl);

struct ChatMessage {
  std::string role;     // system | user | assistant (developer -> system, tool -> user
                        // unless ChatTemplateExtras::tool_responses)
  std::string content;
  // An assistant turn's calls (OpenAI tool_calls), written as <tool_call>
  // blocks by templates with ChatTemplateExtras::tools; others ignore them.
  std::vector<ToolCall> tool_calls = {};
};

// How a Hermes-style template (Qwen2.5) shows the request's tools: in the
// system turn, after its text, `preamble` ("\n\n# Tools\n...<tools>"), each
// tool as "\n" + its JSON, then `postamble` ("\n</tools>\n...<|im_end|>\n").
struct ToolsSection {
  std::string preamble;
  std::string postamble;
};

// What a chatml template adds to the plain format, read from its text by
// ReadChatmlExtras.
struct ChatTemplateExtras {
  // The system turn the template inserts when the conversation does not open
  // with a system message: SmolLM2's "You are a helpful AI assistant named
  // SmolLM, trained by Hugging Face", Qwen2.5's "You are Qwen, created by
  // Alibaba Cloud. You are a helpful assistant.". nullopt: none.
  std::optional<std::string> default_system;
  // Tool results as Qwen2.5 renders them: a run of tool messages shares one
  // user turn, each as "\n<tool_response>\n" + content + "\n</tool_response>".
  // Otherwise a tool message is a user message.
  bool tool_responses = false;
  // Set when the template shows tools (Qwen2.5's "{%- if tools %}" branch);
  // assistant tool_calls are then written as <tool_call> blocks.
  std::optional<ToolsSection> tools;
};

// The extras of a chatml Jinja template: `default_system` from a string
// literal holding a whole system turn ('<|im_start|>system\n...<|im_end|>\n',
// Jinja escapes decoded), `tool_responses` when it mentions <tool_response>.
// A family name or a template without either gives no extras.
ChatTemplateExtras ReadChatmlExtras(absl::string_view tmpl);

// A rendered prompt and where the messages' contents lie in it, so the
// tokenizer can keep control tokens out of them (Tokenizer::Encode's
// `literal` ranges): content_ranges[i] is messages[i]'s content as written
// (trimmed where the family trims), text.substr(begin, end - begin). A
// message whose content is not written (Gemma: a system message with no user
// turn after it) has an empty range at the end of the text.
struct RenderedPrompt {
  std::string text;
  std::vector<engine::TextRange> content_ranges;
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateFamily family, bool fallback = false,
                        ChatTemplateExtras extras = {})
      : family_(family), fallback_(fallback), extras_(std::move(extras)) {}

  // `override_name_or_text` (config) wins over `gguf_template` (the model's
  // tokenizer.chat_template, "" when absent). No template: chatml, marked as
  // fallback. A template we don't recognise also falls back to chatml
  // (`*warning` says so) since a chat endpoint that answers beats none; a
  // config override we don't recognise is InvalidArgument. A chatml template
  // text also sets its extras (ReadChatmlExtras).
  static absl::StatusOr<ChatTemplate> Resolve(absl::string_view override_name_or_text,
                                              absl::string_view gguf_template,
                                              std::string* warning);

  // `family` with the extras `tmpl` (its Jinja text or name) gives it.
  static ChatTemplate FromText(ChatTemplateFamily family, absl::string_view tmpl);

  // The prompt text for `messages`, ending with the assistant header when
  // `add_generation_prompt`. BOS is not included (the tokenizer adds it).
  // `tools` are the request's tool definitions, each as the template's
  // `tojson` writes it (PythonJsonDumps). InvalidArgument (param "messages")
  // for an empty list or an unknown role; (param "tools") for tools when the
  // template has no tools section.
  absl::StatusOr<RenderedPrompt> RenderWithRanges(absl::Span<const ChatMessage> messages,
                                                  bool add_generation_prompt = true,
                                                  absl::Span<const std::string> tools = {}) const;
  // RenderWithRanges' text alone.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     bool add_generation_prompt = true,
                                     absl::Span<const std::string> tools = {}) const;

  // Text that ends an assistant turn in this family ("<|im_end|>"), used as
  // an extra stop string so a model whose vocabulary lacks the token still
  // stops at the turn's end.
  std::vector<std::string> end_of_turn_strings() const;

  ChatTemplateFamily family() const { return family_; }
  bool fallback() const { return fallback_; }
  const ChatTemplateExtras& extras() const { return extras_; }

 private:
  ChatTemplateFamily family_;
  bool fallback_;
  ChatTemplateExtras extras_;
};

}  // namespace tandem::router
