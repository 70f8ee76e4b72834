#pragma once
// Chat templates for /v1/chat/completions. Like llama.cpp's
// llm_chat_detect_template we do not run Jinja: a model's
// tokenizer.chat_template is recognised by the markers it contains and
// rendered by a built-in formatter for its family. Models without a template
// (stories260K) get chatml.
//
// Immutable; any thread.

#include <string>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "absl/strings/string_view.h"
#include "absl/types/span.h"

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
  std::string role;     // system | user | assistant (developer -> system, tool -> user)
  std::string content;
};

class ChatTemplate {
 public:
  explicit ChatTemplate(ChatTemplateFamily family, bool fallback = false)
      : family_(family), fallback_(fallback) {}

  // `override_name_or_text` (config) wins over `gguf_template` (the model's
  // tokenizer.chat_template, "" when absent). No template: chatml, marked as
  // fallback. A template we don't recognise also falls back to chatml
  // (`*warning` says so) since a chat endpoint that answers beats none; a
  // config override we don't recognise is InvalidArgument.
  static absl::StatusOr<ChatTemplate> Resolve(absl::string_view override_name_or_text,
                                              absl::string_view gguf_template,
                                              std::string* warning);

  // The prompt text for `messages`, ending with the assistant header when
  // `add_generation_prompt`. BOS is not included (the tokenizer adds it).
  // InvalidArgument (param "messages") for an empty list or an unknown role.
  absl::StatusOr<std::string> Render(absl::Span<const ChatMessage> messages,
                                     bool add_generation_prompt = true) const;

  // Text that ends an assistant turn in this family ("<|im_end|>"), used as
  // an extra stop string so a model whose vocabulary lacks the token still
  // stops at the turn's end.
  std::vector<std::string> end_of_turn_strings() const;

  ChatTemplateFamily family() const { return family_; }
  bool fallback() const { return fallback_; }

 private:
  ChatTemplateFamily family_;
  bool fallback_;
};

}  // namespace tandem::router
