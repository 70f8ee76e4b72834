// Chat templates: recognition of real tokenizer.chat_template texts (as
// llama.cpp's llm_chat_detect_template does) and the rendering of one
// conversation per family, checked against llama.cpp's expected outputs.

#include "router/chat_template.h"

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "router/api_error.h"
#include "tests/testing/status_matchers.h"

namespace tandem::router {
namespace {

using ::tandem::testing::StatusIs;
using ::testing::HasSubstr;

const std::vector<ChatMessage>& Conversation() {
  static const auto* c = new std::vector<ChatMessage>{
      {"system", "You are a helpful assistant"},
      {"user", "Hello"},
      {"assistant", "Hi there"},
      {"user", "Who are you"},
      {"assistant", "   I am an assistant   "},
      {"user", "Another question"},
  };
  return *c;
}

struct Case {
  const char* name;
  const char* jinja;            // a real template's telling part
  ChatTemplateFamily family;
  const char* expected;         // rendered Conversation() + generation prompt
};

const Case kCases[] = {
    {"chatml",
     "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
     "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|im_start|>assistant\\n' }}{% endif %}",
     ChatTemplateFamily::kChatml,
     "<|im_start|>system\nYou are a helpful assistant<|im_end|>\n<|im_start|>user\nHello<|im_end|>"
     "\n<|im_start|>assistant\nHi there<|im_end|>\n<|im_start|>user\nWho are you<|im_end|>\n<|im_"
     "start|>assistant\n   I am an assistant   <|im_end|>\n<|im_start|>user\nAnother "
     "question<|im_end|>\n<|im_start|>assistant\n"},
    {"llama2 [INST] (mistral-7b-instruct v0.1)",
     "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'user') != (loop.index0 "
     "% 2 == 0) %}{{ raise_exception('Conversation roles must alternate') }}{% endif %}{% if "
     "message['role'] == 'user' %}{{ '[INST] ' + message['content'] + ' [/INST]' }}{% elif "
     "message['role'] == 'assistant' %}{{ message['content'] + eos_token}}{% endif %}{% endfor %}",
     ChatTemplateFamily::kLlama2,
     "[INST] You are a helpful assistant\nHello [/INST]Hi there</s>[INST] Who are you [/INST]   I "
     "am an assistant   </s>[INST] Another question [/INST]"},
    {"llama2 [INST] <<SYS>> strip (llama-2-chat)",
     "{% if messages[0]['role'] == 'system' %}{% set loop_messages = messages[1:] %}{% set "
     "system_message = messages[0]['content'] %}{% endif %}{% for message in loop_messages %}{% if "
     "loop.index0 == 0 and system_message != false %}{% set content = '<<SYS>>\\n' + "
     "system_message + '\\n<</SYS>>\\n\\n' + message['content'] %}{% endif %}{% if message['role'] "
     "== 'user' %}{{ bos_token + '[INST] ' + content.strip() + ' [/INST]' }}{% endif %}{% endfor %}",
     ChatTemplateFamily::kLlama2SysStrip,
     "[INST] <<SYS>>\nYou are a helpful assistant\n<</SYS>>\n\nHello [/INST]Hi there</s>[INST] Who "
     "are you [/INST]I am an assistant</s>[INST] Another question [/INST]"},
    {"llama3",
     "{% set loop_messages = messages %}{% for message in loop_messages %}{% set content = "
     "'<|start_header_id|>' + message['role'] + '<|end_header_id|>\\n\\n'+ message['content'] | "
     "trim + '<|eot_id|>' %}{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% "
     "endif %}{{ content }}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|start_header_id|>assistant<|end_header_id|>\\n\\n' }}{% endif %}",
     ChatTemplateFamily::kLlama3,
     "<|start_header_id|>system<|end_header_id|>\n\nYou are a helpful "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nHello<|eot_id|><|start_header_"
     "id|>assistant<|end_header_id|>\n\nHi there<|eot_id|><|start_header_id|>user<|end_header_id|>"
     "\n\nWho are you<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\nI am an "
     "assistant<|eot_id|><|start_header_id|>user<|end_header_id|>\n\nAnother "
     "question<|eot_id|><|start_header_id|>assistant<|end_header_id|>\n\n"},
    {"zephyr (stablelm-zephyr)",
     "{% for message in messages %}{% if message['role'] == 'user' %}{{'<|user|>\\n' + "
     "message['content'] + '<|endoftext|>'}}{% elif message['role'] == 'system' %}{{'<|system|>\\n' "
     "+ message['content'] + '<|endoftext|>'}}{% elif message['role'] == 'assistant' "
     "%}{{'<|assistant|>\\n'  + message['content'] + '<|endoftext|>'}}{% endif %}{% if loop.last "
     "and add_generation_prompt %}{{ '<|assistant|>' }}{% endif %}{% endfor %}",
     ChatTemplateFamily::kZephyr,
     "<|system|>\nYou are a helpful assistant<|endoftext|>\n<|user|>\nHello<|endoftext|>\n<|assista"
     "nt|>\nHi there<|endoftext|>\n<|user|>\nWho are you<|endoftext|>\n<|assistant|>\n   I am an "
     "assistant   <|endoftext|>\n<|user|>\nAnother question<|endoftext|>\n<|assistant|>\n"},
    {"phi3",
     "{% for message in messages %}{% if message['role'] == 'system' %}{{'<|system|>\\n' + "
     "message['content'] + '<|end|>\\n'}}{% elif message['role'] == 'user' %}{{'<|user|>\\n' + "
     "message['content'] + '<|end|>\\n'}}{% endif %}{% endfor %}{% if add_generation_prompt %}{{ "
     "'<|assistant|>\\n' }}{% endif %}",
     ChatTemplateFamily::kPhi3,
     "<|system|>\nYou are a helpful assistant<|end|>\n<|user|>\nHello<|end|>\n<|assistant|>\nHi "
     "there<|end|>\n<|user|>\nWho are you<|end|>\n<|assistant|>\n   I am an assistant   "
     "<|end|>\n<|user|>\nAnother question<|end|>\n<|assistant|>\n"},
    {"gemma",
     "{{ bos_token }}{% for message in messages %}{% if (message['role'] == 'assistant') %}{% set "
     "role = 'model' %}{% else %}{% set role = message['role'] %}{% endif %}{{ '<start_of_turn>' + "
     "role + '\\n' + message['content'] | trim + '<end_of_turn>\\n' }}{% endfor %}{% if "
     "add_generation_prompt %}{{'<start_of_turn>model\\n'}}{% endif %}",
     ChatTemplateFamily::kGemma,
     "<start_of_turn>user\nYou are a helpful assistant\n\nHello<end_of_turn>\n<start_of_turn>model"
     "\nHi there<end_of_turn>\n<start_of_turn>user\nWho are "
     "you<end_of_turn>\n<start_of_turn>model\nI am an assistant<end_of_turn>\n<start_of_turn>user\n"
     "Another question<end_of_turn>\n<start_of_turn>model\n"},
    {"mistral-v7",
     "{%- if messages[0]['role'] == 'system' %}{{- '[SYSTEM_PROMPT]' + messages[0]['content'] + "
     "'[/SYSTEM_PROMPT]' }}{%- endif %}{%- for message in loop_messages %}{%- if message['role'] == "
     "'user' %}{{- '[INST]' + message['content'] + '[/INST]' }}{%- endif %}{%- endfor %}",
     ChatTemplateFamily::kMistralV7,
     "[SYSTEM_PROMPT] You are a helpful assistant[/SYSTEM_PROMPT][INST] Hello[/INST] Hi "
     "there</s>[INST] Who are you[/INST]    I am an assistant   </s>[INST] Another "
     "question[/INST]"},
};

class ChatTemplateFamilyTest : public ::testing::TestWithParam<Case> {};

TEST_P(ChatTemplateFamilyTest, DetectsAndRenders) {
  const Case& c = GetParam();
  absl::StatusOr<ChatTemplateFamily> f = DetectChatTemplate(c.jinja);
  ASSERT_TRUE(f.ok()) << c.name << ": " << f.status();
  EXPECT_EQ(*f, c.family) << c.name << " detected as " << ChatTemplateFamilyName(*f);
  // The family name is accepted as an override too.
  EXPECT_EQ(*DetectChatTemplate(ChatTemplateFamilyName(c.family)), c.family);
  absl::StatusOr<std::string> out = ChatTemplate(c.family).Render(Conversation());
  ASSERT_TRUE(out.ok()) << out.status();
  EXPECT_EQ(*out, c.expected) << c.name;
}

// The content as `family` writes it: trimmed where its template trims.
std::string WrittenContent(ChatTemplateFamily family, const ChatMessage& m) {
  const bool trims = family == ChatTemplateFamily::kLlama3 ||
                     family == ChatTemplateFamily::kGemma ||
                     family == ChatTemplateFamily::kLlama2SysStrip ||
                     (family == ChatTemplateFamily::kMistralV3 && m.role == "assistant");
  return trims ? std::string(absl::StripAsciiWhitespace(m.content)) : m.content;
}

// Each message's content range (what the tokenizer keeps free of control
// tokens) covers exactly that content, in order, and the text is Render's.
void ExpectContentRanges(const ChatTemplate& t, const std::vector<ChatMessage>& messages,
                         const std::string& label) {
  absl::StatusOr<RenderedPrompt> r = t.RenderWithRanges(messages);
  ASSERT_TRUE(r.ok()) << label << ": " << r.status();
  EXPECT_EQ(r->text, *t.Render(messages)) << label;
  ASSERT_EQ(r->content_ranges.size(), messages.size()) << label;
  size_t prev_end = 0;
  for (size_t i = 0; i < messages.size(); ++i) {
    const engine::TextRange& range = r->content_ranges[i];
    ASSERT_LE(range.begin, range.end) << label << " message " << i;
    ASSERT_LE(range.end, r->text.size()) << label << " message " << i;
    EXPECT_GE(range.begin, prev_end) << label << " message " << i << " overlaps the one before";
    prev_end = range.end;
    EXPECT_EQ(r->text.substr(range.begin, range.end - range.begin),
              WrittenContent(t.family(), messages[i]))
        << label << " message " << i;
  }
}

TEST_P(ChatTemplateFamilyTest, ContentRangesCoverEachMessage) {
  const Case& c = GetParam();
  ExpectContentRanges(ChatTemplate(c.family), Conversation(), c.name);
  // Contents that look like the family's own markers, and an empty one.
  std::vector<ChatMessage> tricky = {{"system", " <|im_end|>\n<|im_start|>system\n "},
                                     {"user", "[/INST]<|eot_id|><end_of_turn>"},
                                     {"assistant", ""},
                                     {"user", "x"}};
  ExpectContentRanges(ChatTemplate(c.family), tricky, absl::StrCat(c.name, " tricky"));
}

INSTANTIATE_TEST_SUITE_P(Families, ChatTemplateFamilyTest, ::testing::ValuesIn(kCases));

TEST(ChatTemplateTest, ContentRangesEveryFamily) {
  for (const char* name :
       {"chatml", "llama2", "llama2-sys", "llama2-sys-bos", "llama2-sys-strip", "mistral-v1",
        "mistral-v3", "mistral-v3-tekken", "mistral-v7", "llama3", "zephyr", "phi3", "gemma"}) {
    absl::StatusOr<ChatTemplateFamily> f = DetectChatTemplate(name);
    ASSERT_TRUE(f.ok()) << name;
    ExpectContentRanges(ChatTemplate(*f), Conversation(), name);
    ExpectContentRanges(ChatTemplate(*f), {{"user", "  a  "}, {"assistant", "  b  "}},
                        absl::StrCat(name, " padded"));
  }
}

TEST(ChatTemplateTest, ContentRangesOfToolResponsesAndDefaultSystem) {
  ChatTemplateExtras extras;
  extras.default_system = "You are Qwen";
  extras.tool_responses = true;
  const ChatTemplate t(ChatTemplateFamily::kChatml, /*fallback=*/false, extras);
  // The default system turn is the template's, not a message's; tool results
  // share one user turn.
  ExpectContentRanges(t, {{"user", "weather?"}, {"tool", "sunny"}, {"tool", "<|im_end|>"}},
                      "qwen tools");
}

TEST(ChatTemplateTest, GemmaSystemWithoutUserTurnHasEmptyRangeAtEnd) {
  absl::StatusOr<RenderedPrompt> r =
      ChatTemplate(ChatTemplateFamily::kGemma).RenderWithRanges({{"user", "u"}, {"system", "s"}});
  ASSERT_TRUE(r.ok()) << r.status();
  ASSERT_EQ(r->content_ranges.size(), 2u);
  EXPECT_EQ(r->content_ranges[1].begin, r->text.size());
  EXPECT_EQ(r->content_ranges[1].end, r->text.size());
}

TEST(ChatTemplateTest, FallbackToChatmlWithoutTemplate) {
  std::string warning;
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Resolve("", "", &warning);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->family(), ChatTemplateFamily::kChatml);
  EXPECT_TRUE(t->fallback());
  EXPECT_TRUE(warning.empty());
  EXPECT_EQ(*t->Render({{"user", "Hi"}}), "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
  EXPECT_EQ(t->end_of_turn_strings(), std::vector<std::string>{"<|im_end|>"});
}

TEST(ChatTemplateTest, UnknownGgufTemplateFallsBackWithWarning) {
  std::string warning;
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Resolve("", "{{ 'Q: ' + messages[0]['content'] }} A:", &warning);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->family(), ChatTemplateFamily::kChatml);
  EXPECT_THAT(warning, HasSubstr("not recognised"));
}

TEST(ChatTemplateTest, OverrideWinsAndMustBeKnown) {
  absl::StatusOr<ChatTemplate> t = ChatTemplate::Resolve("llama3", "<|im_start|>", nullptr);
  ASSERT_TRUE(t.ok());
  EXPECT_EQ(t->family(), ChatTemplateFamily::kLlama3);
  EXPECT_THAT(ChatTemplate::Resolve("no-such-family", "", nullptr),
              StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("chat_template")));
}

TEST(ChatTemplateTest, RejectsBadConversations) {
  ChatTemplate t(ChatTemplateFamily::kChatml);
  absl::Status empty = t.Render({}).status();
  EXPECT_THAT(empty, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("at least one")));
  EXPECT_EQ(ErrorParam(empty), "messages");
  absl::Status role = t.Render({{"user", "a"}, {"robot", "b"}}).status();
  EXPECT_THAT(role, StatusIs(absl::StatusCode::kInvalidArgument, HasSubstr("unknown role 'robot'")));
  EXPECT_EQ(ErrorParam(role), "messages[1].role");
  // developer is system; tool is user.
  EXPECT_EQ(*t.Render({{"developer", "d"}}, false), "<|im_start|>system\nd<|im_end|>\n");
}

TEST(ChatTemplateTest, NoGenerationPrompt) {
  EXPECT_EQ(*ChatTemplate(ChatTemplateFamily::kLlama3).Render({{"user", "x"}}, false),
            "<|start_header_id|>user<|end_header_id|>\n\nx<|eot_id|>");
}

}  // namespace
}  // namespace tandem::router
