// SchemaAcceptor against Debian's python3-jsonschema as the oracle
// (schema_oracle.py): for several schemas, documents generated from the
// schema are accepted byte by byte (every prefix) and validate; generated
// documents mutated byte by byte, and arbitrary JSON, are accepted exactly
// when the oracle validates them, except that a valid document may be refused
// when it falls in json_schema.h's documented narrowing (a key, or an
// enum/const value, not in its canonical spelling). Plus the schema
// compiler's 400s: keyword and JSON path.
#include <gtest/gtest.h>

#include <cstdio>
#include <random>
#include <string>

#include <nlohmann/json.hpp>

#include "../support/byte_mutation.h"
#include "../support/python_oracle.h"

#include "sluice/structured/json_schema.h"
#include "sluice/structured/schema_acceptor.h"

namespace sluice::structured {
namespace {

using Json = nlohmann::ordered_json;

std::shared_ptr<const JsonSchema> compiled(const Json& schema) {
  auto result = compile_json_schema(nlohmann::json::parse(schema.dump()));
  EXPECT_TRUE(result.ok()) << result.error_message();
  return result.ok() ? *result : nullptr;
}

bool accepts(const JsonSchema& schema, std::string_view text) {
  SchemaAcceptor acceptor(schema);
  return acceptor.feed(text) && acceptor.can_end();
}

// --- the compiler -----------------------------------------------------------

std::string compile_error(const char* schema) {
  auto result = compile_json_schema(nlohmann::json::parse(schema));
  return result.ok() ? std::string("(compiled)") : result.error().message;
}

TEST(JsonSchemaCompiler, NamesTheUnsupportedKeywordAndItsPath) {
  EXPECT_EQ(compile_error(R"({"type":"object","properties":{"a":{"anyOf":[{"type":"string"}]}}})"),
            "unsupported keyword 'anyOf' at $.properties.a");
  EXPECT_EQ(compile_error(R"({"$ref":"#/$defs/x"})"), "unsupported keyword '$ref' at $");
  EXPECT_EQ(compile_error(R"({"type":"array","items":{"type":"string","pattern":"^a"}})"),
            "unsupported keyword 'pattern' at $.items");
  EXPECT_EQ(compile_error(R"({"type":"string","format":"date"})"), "unsupported keyword 'format' at $");
  EXPECT_EQ(compile_error(R"({"type":"string","minLength":1})"), "unsupported keyword 'minLength' at $");
  EXPECT_EQ(compile_error(R"({"type":"object","additionalProperties":{"oneOf":[]}})"),
            "unsupported keyword 'oneOf' at $.additionalProperties");
  EXPECT_EQ(compile_error(R"({"patternProperties":{}})"), "unsupported keyword 'patternProperties' at $");
  EXPECT_EQ(compile_error(R"({"type":"strin"})"), "unknown type \"strin\" at $.type");
  EXPECT_EQ(compile_error(R"({"properties":{"a":{}},"required":["b"]})"),
            "required property 'b' is not in 'properties' at $.required");
  EXPECT_EQ(compile_error(R"({"type":"array","minItems":3,"maxItems":2})"), "'minItems' is greater than 'maxItems' at $");
  EXPECT_EQ(compile_error(R"({"type":"integer","enum":["a"]})"), "no enum value has the schema's type at $.enum");
  EXPECT_EQ(compile_error(R"({"enum":[{"a":1}]})"), "enum values must be strings, numbers, booleans or null at $.enum");
  EXPECT_EQ(compile_error(R"({"items":[{}]})"), "tuple 'items' (an array of schemas) is not supported at $.items");
  EXPECT_EQ(compile_error(R"({"title":"t","description":"d","$schema":"x","examples":[1],"default":1})"), "(compiled)");
  std::string deep = "{}";
  for (int i = 0; i < 20; ++i) deep = R"({"type":"array","items":)" + deep + "}";
  EXPECT_NE(compile_error(deep.c_str()).find("deeper than"), std::string::npos);
}

// --- hand-picked semantics ----------------------------------------------------

TEST(SchemaAcceptor, KeysTypesAndRequired) {
  auto schema = compiled(Json::parse(R"({"type":"object","properties":{"name":{"type":"string"},
    "n":{"type":"integer"},"names":{"type":"array","items":{"enum":["a","ab",1,12]},"maxItems":2}},
    "required":["name"],"additionalProperties":false})"));
  EXPECT_TRUE(accepts(*schema, R"({"name":"x"})"));
  EXPECT_TRUE(accepts(*schema, R"({ "n" : 3, "name" : "x\"y", "names": ["ab", 12] })"));
  EXPECT_FALSE(accepts(*schema, R"({"n":3})"));                          // name is required
  EXPECT_FALSE(accepts(*schema, R"({"name":"x","name":"y"})"));          // once
  EXPECT_FALSE(accepts(*schema, R"({"name":"x","other":1})"));           // not declared
  EXPECT_FALSE(accepts(*schema, R"({"name":"x","n":3.5})"));             // integer
  EXPECT_FALSE(accepts(*schema, R"({"name":"x","n":1e3})"));
  EXPECT_FALSE(accepts(*schema, R"({"name":1})"));
  EXPECT_FALSE(accepts(*schema, R"({"name":"x","names":["a","a","a"]})"));  // maxItems
  EXPECT_FALSE(accepts(*schema, R"({"name":"x","names":["b"]})"));
  EXPECT_FALSE(accepts(*schema, R"({"name":"x","names":[123]})"));
  SchemaAcceptor state(*schema);
  ASSERT_TRUE(state.feed(std::string_view(R"({"na)")));
  EXPECT_FALSE(SchemaAcceptor(state).feed('x'));                         // no such key
  EXPECT_FALSE(state.in_plain_string());                                 // keys are walked, not masked
  ASSERT_TRUE(state.feed(std::string_view(R"(me":")")));
  EXPECT_TRUE(state.in_plain_string());
  ASSERT_TRUE(state.feed(std::string_view(R"(v", "names": [)")));
  // Only "a", "ab", 1 and 12 start a value here.
  for (const char refused : {'2', '-', 't', 'n', '{', '['}) EXPECT_FALSE(SchemaAcceptor(state).feed(refused)) << refused;
  SchemaAcceptor quoted(state);
  ASSERT_TRUE(quoted.feed('"'));
  EXPECT_TRUE(SchemaAcceptor(quoted).feed(std::string_view(R"(a")")));
  EXPECT_TRUE(SchemaAcceptor(quoted).feed(std::string_view(R"(ab")")));
  EXPECT_FALSE(SchemaAcceptor(quoted).feed('b'));
  EXPECT_FALSE(SchemaAcceptor(quoted).feed(std::string_view("abc")));
  EXPECT_FALSE(SchemaAcceptor(quoted).feed(std::string_view(R"(\u0061")")));  // enum values unescaped only
  ASSERT_TRUE(state.feed(std::string_view("1")));                       // 1 or 12
  ASSERT_TRUE(state.feed(std::string_view("]}")));
  EXPECT_TRUE(state.is_complete());
  EXPECT_FALSE(SchemaAcceptor(state).feed(' '));
}

TEST(SchemaAcceptor, TopLevelScalarsEndWhenTheyCould) {
  auto numbers = compiled(Json::parse(R"({"enum":[1,12,"a"]})"));
  SchemaAcceptor state(*numbers);
  ASSERT_TRUE(state.feed('1'));
  EXPECT_TRUE(state.can_end());
  EXPECT_FALSE(state.is_complete());
  ASSERT_TRUE(state.feed('2'));
  EXPECT_TRUE(state.is_complete());
  auto any = compiled(Json::parse("{}"));
  EXPECT_TRUE(accepts(*any, R"([1, {"x": [null, true]}, "s"])"));
  EXPECT_TRUE(accepts(*any, "-0.5e+3"));
  auto open = compiled(Json::parse(R"({"properties":{"a":{"type":"boolean"}},"additionalProperties":{"type":"null"}})"));
  EXPECT_TRUE(accepts(*open, R"({"ab":null,"a":true,"b":null})"));
  EXPECT_FALSE(accepts(*open, R"({"ab":true})"));
  EXPECT_FALSE(accepts(*open, R"({"a":true,"a":false})"));
  EXPECT_FALSE(accepts(*open, R"({"a\u0062":null})"));  // keys are written without escapes
  SchemaAcceptor additional_key(*open);
  ASSERT_TRUE(additional_key.feed(std::string_view(R"({"a)")));
  EXPECT_FALSE(additional_key.in_plain_string());       // could still be "a"
  ASSERT_TRUE(additional_key.feed(std::string_view("x")));
  EXPECT_TRUE(additional_key.in_plain_string());        // only an additional key now
}

// --- the oracle ------------------------------------------------------------------

struct Verdict {
  bool valid = false;
  bool narrowed = false;  // schema_oracle.py: a key or enum/const value not in its canonical spelling
};

// One schema_oracle.py run for every case (documents as hex: mutations may
// break UTF-8).
Result<std::vector<std::vector<Verdict>>> oracle(const Json& cases) {
  Json job;
  job["cases"] = cases;
  SLUICE_TRY_ASSIGN(text, testing::run_python_oracle("tests/structured/schema_oracle.py", "jsonschema", job.dump()));
  std::vector<std::vector<Verdict>> out;
  for (const auto& c : Json::parse(text)) {
    out.emplace_back();
    for (const auto& v : c) out.back().push_back({v.at("valid").get<bool>(), v.at("narrowed").get<bool>()});
  }
  return out;
}

// A random document valid against `schema` (the supported subset), keys in random order.
Json instance(const Json& schema, std::mt19937_64& rng, int depth);

Json any_value(std::mt19937_64& rng, int depth) {
  static const Json kAny = Json::object();
  static const std::vector<std::string> types = {"object", "array", "string", "number", "integer", "boolean", "null"};
  const int lo = depth >= 3 ? 2 : 0;
  Json schema = {{"type", types[std::uniform_int_distribution<std::size_t>(lo, types.size() - 1)(rng)]}};
  return instance(schema, rng, depth);
}

Json instance(const Json& schema, std::mt19937_64& rng, int depth) {
  auto coin = [&](int percent) { return std::uniform_int_distribution<int>(0, 99)(rng) < percent; };
  auto pick = [&](std::size_t n) { return std::uniform_int_distribution<std::size_t>(0, n - 1)(rng); };
  if (schema.contains("const")) return schema["const"];
  if (schema.contains("enum")) return schema["enum"][pick(schema["enum"].size())];
  std::vector<std::string> types;
  if (!schema.contains("type")) return any_value(rng, depth);
  if (schema["type"].is_string()) types.push_back(schema["type"]);
  else for (const auto& t : schema["type"]) types.push_back(t);
  const std::string type = types[pick(types.size())];
  static const std::vector<std::string> strings = {"", "a", "héllo", "日本語", "tab\there", "quote\"q", "back\\slash",
                                                   "ctl\x01", "emoji 😀", "/slash", "{\"x\": [1]}"};
  if (type == "string") return strings[pick(strings.size())];
  if (type == "integer") return std::uniform_int_distribution<std::int64_t>(-100000, 100000)(rng);
  if (type == "number")
    return coin(50) ? Json(std::uniform_int_distribution<std::int64_t>(-1000, 1000)(rng))
                    : Json(std::uniform_real_distribution<double>(-1e6, 1e6)(rng));
  if (type == "boolean") return coin(50);
  if (type == "null") return nullptr;
  if (type == "array") {
    const std::size_t lo = schema.value("minItems", 0u);
    const std::size_t hi = std::min<std::size_t>(schema.value("maxItems", 1000u), lo + (depth >= 3 ? 0 : 3));
    Json array = Json::array();
    const Json items = schema.value("items", Json::object());
    for (std::size_t n = std::uniform_int_distribution<std::size_t>(lo, hi)(rng); n > 0; --n)
      array.push_back(instance(items, rng, depth + 1));
    return array;
  }
  // object
  std::vector<std::string> keys;
  const Json properties = schema.value("properties", Json::object());
  const Json required = schema.value("required", Json::array());
  for (const auto& [name, unused] : properties.items())
    if (coin(60) || std::find(required.begin(), required.end(), name) != required.end()) keys.push_back(name);
  const Json additional = schema.value("additionalProperties", Json(true));
  if (!(additional.is_boolean() && !additional.get<bool>()) && depth < 3)
    for (const char* extra : {"x", "extra key", "ünï"})
      if (coin(25) && !properties.contains(extra)) keys.push_back(extra);
  std::shuffle(keys.begin(), keys.end(), rng);
  Json object = Json::object();
  for (const std::string& key : keys) {
    const Json sub = properties.contains(key) ? properties[key] : additional.is_object() ? additional : Json::object();
    object[key] = instance(sub, rng, depth + 1);
  }
  return object;
}

std::string spelled(const Json& value, std::mt19937_64& rng) {
  return value.dump(std::uniform_int_distribution<int>(-1, 3)(rng));
}

const std::vector<const char*> kOracleSchemas = {
    R"({"type":"object","title":"person","properties":{
        "name":{"type":"string","description":"full name"},
        "age":{"type":"integer"},
        "email":{"type":["string","null"]},
        "tags":{"type":"array","items":{"type":"string","enum":["red","green","gr\"een","blue"]},"minItems":1,"maxItems":3},
        "address":{"type":"object","properties":{"street":{"type":"string"},"zip":{"type":"string"}},
                   "required":["street"],"additionalProperties":false}},
      "required":["name","age"],"additionalProperties":false})",
    R"({"type":"object","properties":{"a":{"const":1},"ab":{"type":"number"},"abc":{"type":"boolean"}},
        "additionalProperties":{"type":"boolean"}})",
    R"({"type":"array","items":{"type":"object","properties":{"id":{"type":"integer"},
        "kind":{"enum":["x","xy",1,12,-3.5,true,null]}},"required":["id","kind"]},"maxItems":4})",
    R"({"enum":[1,12,123,"a",false]})",
    R"({"type":"object","properties":{"f":{"enum":[1.0,2.5,-0.25]},"i":{"type":"integer","enum":[1,7,70]},
        "s":{"enum":["é","日本","a\\b"]}},"additionalProperties":false})",
    R"({"type":["integer","boolean","null"]})",
    R"({"type":"object","properties":{"meta":{},"list":{"type":"array"},"n":{"type":"number"}},"required":["meta"]})",
    R"({})",
};

// Valid documents respelled by hand (the generator writes canonical text, and
// mutations rarely respell and stay valid): inside the documented narrowing
// (an escaped key or enum value, an enum number written another way) and
// outside it, where the acceptor must take them. They also check the oracle's
// `narrowed` verdict both ways.
struct Respelled {
  std::size_t schema;  // index in kOracleSchemas
  const char* text;
  bool narrowed;
};
const std::vector<Respelled> kRespelled = {
    {0, R"({"name":"\u0078","age":-0})", false},
    {0, R"({"name":"x\/y","age":1,"email":"\u00e9\n"})", false},
    {0, R"({"n\u0061me":"x","age":1})", true},
    {0, R"({"name":"x","age":1,"tags":["\u0072ed"]})", true},
    {1, R"({"ab":1.50,"x":true})", false},
    {1, R"({"ab":-0.0e+0})", false},
    {1, R"({"a":1.0})", true},
    {2, R"([{"id":-0,"kind":"x"}])", false},
    {2, R"([{"id":0,"kind":12.0}])", true},
    {3, "1.2e1", true},
    {4, R"({"f":2.50})", true},
    {4, R"({"s":"\u65e5\u672c"})", true},
    {5, "-0", false},
    {6, R"({"meta":{"k":"\ud83d\ude00"},"n":1E2})", false},
    {7, R"(["\u0041",-0.0,1e+2])", false},
};

TEST(SchemaAcceptor, AgreesWithPythonJsonschema) {
  std::mt19937_64 rng(20261130);
  const std::string alphabet = "{}[]\":,0123456789.-+eE tfnulr \n\\axyzgbé";
  Json cases = Json::array();
  std::vector<std::vector<bool>> ours;
  std::vector<std::vector<std::string>> texts;
  std::vector<std::size_t> num_generated;
  std::vector<std::size_t> respelled_at;  // kRespelled[i] is texts[schema][respelled_at[i]]
  for (std::size_t c = 0; c < kOracleSchemas.size(); ++c) {
    const char* text = kOracleSchemas[c];
    const Json schema = Json::parse(text);
    auto compiled_schema = compiled(schema);
    ASSERT_NE(compiled_schema, nullptr) << text;
    std::vector<std::string> documents;
    std::vector<bool> accepted;
    for (int i = 0; i < 150; ++i) {
      const std::string doc = spelled(instance(schema, rng, 0), rng);
      // Every prefix of a valid document is accepted.
      SchemaAcceptor state(*compiled_schema);
      for (std::size_t k = 0; k < doc.size(); ++k)
        ASSERT_TRUE(state.feed(static_cast<std::uint8_t>(doc[k]))) << text << "\nrefused byte " << k << " of\n" << doc;
      ASSERT_TRUE(state.can_end()) << doc;
      documents.push_back(doc);
      accepted.push_back(true);
    }
    num_generated.push_back(documents.size());
    for (int i = 0; i < 600; ++i) {
      std::string doc = documents[static_cast<std::size_t>(i) % num_generated.back()];
      testing::mutate_bytes(doc, 1 + i % 3, alphabet, rng);
      documents.push_back(doc);
      accepted.push_back(accepts(*compiled_schema, doc));
    }
    for (int i = 0; i < 150; ++i) {
      const std::string doc = spelled(any_value(rng, 0), rng);
      documents.push_back(doc);
      accepted.push_back(accepts(*compiled_schema, doc));
    }
    for (const Respelled& r : kRespelled) {
      if (r.schema != c) continue;
      respelled_at.push_back(documents.size());
      documents.push_back(r.text);
      accepted.push_back(accepts(*compiled_schema, r.text));
    }
    Json encoded = Json::array();
    for (const std::string& doc : documents) encoded.push_back(testing::hex_bytes(doc));
    cases.push_back({{"schema", schema}, {"documents", encoded}});
    texts.push_back(std::move(documents));
    ours.push_back(std::move(accepted));
  }
  const auto oracle_result = oracle(cases);
  ASSERT_TRUE(oracle_result.ok()) << oracle_result.error_message();
  const std::vector<std::vector<Verdict>>& verdicts = oracle_result.value();
  ASSERT_EQ(verdicts.size(), ours.size());
  std::int64_t num_valid = 0, num_invalid = 0, num_narrowed_refused = 0;
  for (std::size_t c = 0; c < ours.size(); ++c) {
    ASSERT_EQ(verdicts[c].size(), ours[c].size());
    for (std::size_t d = 0; d < ours[c].size(); ++d) {
      const Verdict& v = verdicts[c][d];
      const std::string& doc = texts[c][d];
      if (ours[c][d]) {
        EXPECT_TRUE(v.valid) << "accepted but invalid under " << kOracleSchemas[c] << ":\n" << doc;
      } else if (v.valid) {
        EXPECT_TRUE(v.narrowed) << "valid, outside the documented narrowing, but refused under " << kOracleSchemas[c]
                                << ":\n" << doc;
        ++num_narrowed_refused;
      }
      (v.valid ? num_valid : num_invalid) += 1;
    }
  }
  ASSERT_EQ(respelled_at.size(), kRespelled.size());
  for (std::size_t i = 0; i < kRespelled.size(); ++i) {
    const Verdict& v = verdicts[kRespelled[i].schema][respelled_at[i]];
    EXPECT_TRUE(v.valid) << kRespelled[i].text;
    EXPECT_EQ(v.narrowed, kRespelled[i].narrowed) << kRespelled[i].text;
  }
  std::printf("oracle: %zu schemas, %lld valid and %lld invalid documents agree; %lld valid ones refused, each a "
              "key or enum value in a non-canonical spelling\n",
              ours.size(), static_cast<long long>(num_valid), static_cast<long long>(num_invalid),
              static_cast<long long>(num_narrowed_refused));
}

}  // namespace
}  // namespace sluice::structured
