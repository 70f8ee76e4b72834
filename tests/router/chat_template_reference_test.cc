// The real models' own chat templates against transformers: for SmolLM2-135M-
// Instruct and Qwen2.5-Coder-0.5B-Instruct, tests/data/chat_template/
// reference.json holds the GGUF's tokenizer.chat_template and conversations
// rendered by transformers' apply_chat_template
// (tests/reference/gen_chat_templates.py). ChatTemplate::Resolve on that text
// must pick chatml with the model's default system prompt (and Qwen2.5's tool
// results) and render every conversation byte for byte the same.

#include <cctype>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "nlohmann/json.hpp"
#include "router/chat_template.h"
#include "router/openai_request.h"
#include "tests/testing/test_paths.h"

namespace tandem::router {
namespace {

using json = nlohmann::json;

const json& Reference() {
  static const json* ref = [] {
    std::ifstream in(testing::RequireTestDataFile("chat_template/reference.json"));
    std::stringstream ss;
    ss << in.rdbuf();
    return new json(json::parse(ss.str(), nullptr, /*allow_exceptions=*/false));
  }();
  return *ref;
}

const json* FindModel(const std::string& name) {
  for (const json& m : Reference()["models"]) {
    if (m["name"] == name) {
      return &m;
    }
  }
  return nullptr;
}

std::vector<ChatMessage> Messages(const json& c) {
  std::vector<ChatMessage> out;
  for (const json& m : c["messages"]) {
    out.push_back({m["role"].get<std::string>(), m["content"].get<std::string>()});
  }
  return out;
}

class ModelTemplateTest : public ::testing::TestWithParam<const char*> {};

TEST_P(ModelTemplateTest, RendersAsTransformers) {
  ASSERT_FALSE(Reference().is_discarded()) << "chat_template/reference.json does not parse";
  const json* model = FindModel(GetParam());
  ASSERT_NE(model, nullptr) << GetParam() << " is not in reference.json";
  std::string warning;
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Resolve("", (*model)["chat_template"].get<std::string>(), &warning);
  ASSERT_TRUE(t.ok()) << t.status();
  EXPECT_EQ(t->family(), ChatTemplateFamily::kChatml);
  EXPECT_FALSE(t->fallback());
  EXPECT_EQ(warning, "");
  EXPECT_EQ(t->end_of_turn_strings(), std::vector<std::string>{(*model)["eos_token"]});
  const json& cases = (*model)["cases"];
  EXPECT_GE(cases.size(), 10u);
  for (const json& c : cases) {
    absl::StatusOr<std::string> out =
        t->Render(Messages(c), c["add_generation_prompt"].get<bool>());
    ASSERT_TRUE(out.ok()) << c["name"] << ": " << out.status();
    EXPECT_EQ(*out, c["expected"].get<std::string>()) << GetParam() << " / " << c["name"];
  }
}

INSTANTIATE_TEST_SUITE_P(RealModels, ModelTemplateTest,
                         ::testing::Values("SmolLM2-135M-Instruct", "Qwen2.5-Coder-0.5B-Instruct"),
                         [](const ::testing::TestParamInfo<const char*>& info) {
                           std::string name;
                           for (const char* c = info.param; *c != '\0'; ++c) {
                             if (std::isalnum(static_cast<unsigned char>(*c))) {
                               name += *c;
                             }
                           }
                           return name;
                         });

// Qwen2.5's tools branch: each request body (tools and messages in the OpenAI
// wire form, assistant tool_calls with arguments as JSON strings) goes
// through ParseOpenAiRequest and the template, as in the router, and must
// give transformers' rendering (which got the arguments parsed, as vLLM
// passes them).
TEST(ModelTemplateTest, QwenToolsRenderAsTransformers) {
  const json* model = FindModel("Qwen2.5-Coder-0.5B-Instruct");
  ASSERT_NE(model, nullptr);
  absl::StatusOr<ChatTemplate> t =
      ChatTemplate::Resolve("", (*model)["chat_template"].get<std::string>(), nullptr);
  ASSERT_TRUE(t.ok()) << t.status();
  ASSERT_TRUE(t->extras().tools.has_value());
  std::vector<json> cases;
  for (const char* group : {"tool_cases", "cluster_cases"}) {
    for (const json& c : (*model)[group]) {
      cases.push_back(c);
    }
  }
  EXPECT_EQ(cases.size(), 8u);
  for (const json& c : cases) {
    absl::StatusOr<OpenAiRequest> r =
        ParseOpenAiRequest(OpenAiEndpoint::kChat, c["request"].get<std::string>());
    ASSERT_TRUE(r.ok()) << c["name"] << ": " << r.status();
    absl::StatusOr<std::string> out =
        t->Render(*r->gen.messages, c.value("add_generation_prompt", true), r->gen.tools);
    ASSERT_TRUE(out.ok()) << c["name"] << ": " << out.status();
    EXPECT_EQ(*out, c["expected"].get<std::string>()) << c["name"];
  }
}

TEST(ChatmlExtrasTest, DefaultSystemPrompts) {
  EXPECT_EQ(
      ReadChatmlExtras((*FindModel("SmolLM2-135M-Instruct"))["chat_template"].get<std::string>())
          .default_system,
      "You are a helpful AI assistant named SmolLM, trained by Hugging Face");
  ChatTemplateExtras qwen = ReadChatmlExtras(
      (*FindModel("Qwen2.5-Coder-0.5B-Instruct"))["chat_template"].get<std::string>());
  EXPECT_EQ(qwen.default_system,
            "You are Qwen, created by Alibaba Cloud. You are a helpful assistant.");
  EXPECT_TRUE(qwen.tool_responses);
  // A plain chatml template, the name, or a literal that is not a whole system
  // turn: no extras.
  for (const char* plain :
       {"chatml",
        "{% for message in messages %}{{'<|im_start|>' + message['role'] + '\\n' + "
        "message['content'] + '<|im_end|>' + '\\n'}}{% endfor %}",
        "{{ '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}",
        "{{ '<|im_start|>system\\nunterminated"}) {
    ChatTemplateExtras e = ReadChatmlExtras(plain);
    EXPECT_FALSE(e.default_system.has_value()) << plain;
    EXPECT_FALSE(e.tool_responses) << plain;
  }
  // Escapes are decoded as Jinja does; double quotes work too.
  EXPECT_EQ(ReadChatmlExtras(R"({{ "<|im_start|>system\nIt's \"quoted\"\tok<|im_end|>\n" }})")
                .default_system,
            "It's \"quoted\"\tok");
  // An override naming the family renders plain chatml.
  absl::StatusOr<ChatTemplate> named = ChatTemplate::Resolve("chatml", "", nullptr);
  ASSERT_TRUE(named.ok());
  EXPECT_EQ(*named->Render({{"user", "Hi"}}),
            "<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n");
}

}  // namespace
}  // namespace tandem::router
