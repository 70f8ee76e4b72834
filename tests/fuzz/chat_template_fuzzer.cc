// libFuzzer harness for the chat template renderer. An input is a JSON
// object as the router would assemble it:
//   {"override": "llama3", "gguf_template": "<jinja text>",
//    "messages": [{"role": "user", "content": "Hi"}], "add_generation_prompt": true}
// The template is resolved (override name or text, else the model's
// template, else chatml), then the messages are rendered with it and with
// every family, and the end-of-turn strings are asked for.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "nlohmann/json.hpp"
#include "router/chat_template.h"
#include "tests/fuzz/fuzz_util.h"

namespace tandem::router {
namespace {

constexpr ChatTemplateFamily kLastFamily = ChatTemplateFamily::kGemma;

std::string StringField(const nlohmann::json& j, const char* key) {
  auto it = j.find(key);
  return it != j.end() && it->is_string() ? it->get<std::string>() : std::string();
}

std::vector<ChatMessage> Messages(const nlohmann::json& j) {
  std::vector<ChatMessage> out;
  auto it = j.find("messages");
  if (it == j.end() || !it->is_array()) {
    return out;
  }
  for (const nlohmann::json& m : *it) {
    if (m.is_object()) {
      out.push_back(ChatMessage{StringField(m, "role"), StringField(m, "content")});
    }
  }
  return out;
}

void RenderWith(const ChatTemplate& t, const std::vector<ChatMessage>& messages, bool add_gen) {
  absl::StatusOr<std::string> text = t.Render(messages, add_gen);
  if (!text.ok()) {
    fuzz::Require(text.status().code() == absl::StatusCode::kInvalidArgument,
                  "a bad message list is InvalidArgument");
  }
  (void)t.end_of_turn_strings();
}

void Run(const nlohmann::json& j) {
  const std::vector<ChatMessage> messages = Messages(j);
  auto gen = j.find("add_generation_prompt");
  const bool add_gen = gen == j.end() || !gen->is_boolean() || gen->get<bool>();
  std::string warning;
  absl::StatusOr<ChatTemplate> resolved =
      ChatTemplate::Resolve(StringField(j, "override"), StringField(j, "gguf_template"), &warning);
  if (resolved.ok()) {
    RenderWith(*resolved, messages, add_gen);
  }
  for (int f = 0; f <= static_cast<int>(kLastFamily); ++f) {
    const auto family = static_cast<ChatTemplateFamily>(f);
    absl::StatusOr<ChatTemplateFamily> by_name = DetectChatTemplate(ChatTemplateFamilyName(family));
    fuzz::Require(by_name.ok() && *by_name == family, "a family's name detects the family");
    RenderWith(ChatTemplate(family), messages, add_gen);
  }
}

}  // namespace
}  // namespace tandem::router

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json j = nlohmann::json::parse(data, data + size, nullptr, /*allow_exceptions=*/false);
  if (j.is_object()) {
    tandem::router::Run(j);
  }
  return 0;
}
