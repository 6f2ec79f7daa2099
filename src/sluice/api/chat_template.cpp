#include "sluice/api/chat_template.h"

#include <array>
#include <ctime>

#include "sluice/api/jinja_builtins.h"
#include "sluice/api/jinja_eval.h"
#include "sluice/api/jinja_parser.h"

namespace sluice::api {
namespace {

using jinja::Value;

Value to_value(const nlohmann::ordered_json& j, int depth = 0) {
  if (depth > 256) throw jinja::RenderError("input JSON nested too deeply");
  switch (j.type()) {
    case nlohmann::ordered_json::value_t::null:
      return Value(jinja::None{});
    case nlohmann::ordered_json::value_t::boolean:
      return Value(j.get<bool>());
    case nlohmann::ordered_json::value_t::number_integer:
      return Value(j.get<std::int64_t>());
    case nlohmann::ordered_json::value_t::number_unsigned: {
      const auto u = j.get<std::uint64_t>();
      if (u > static_cast<std::uint64_t>(INT64_MAX)) throw jinja::RenderError("integer in input out of range");
      return Value(static_cast<std::int64_t>(u));
    }
    case nlohmann::ordered_json::value_t::number_float:
      return Value(j.get<double>());
    case nlohmann::ordered_json::value_t::string:
      return Value(j.get<std::string>());
    case nlohmann::ordered_json::value_t::array: {
      jinja::List items;
      items.reserve(j.size());
      for (const auto& item : j) items.push_back(to_value(item, depth + 1));
      return Value(std::move(items));
    }
    case nlohmann::ordered_json::value_t::object: {
      jinja::Dict d;
      for (const auto& [k, item] : j.items()) d.set(k, to_value(item, depth + 1));
      return Value(std::move(d));
    }
    default:
      throw jinja::RenderError("unsupported JSON value in input (binary or discarded)");
  }
}

std::string local_strftime(std::string_view format) {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  std::array<char, 512> buf{};
  const std::size_t n = std::strftime(buf.data(), buf.size(), std::string(format).c_str(), &local);
  return std::string(buf.data(), n);
}

Value make_callable(std::string name, std::function<Value(jinja::Interpreter&, jinja::CallArgs&&)> fn) {
  auto c = std::make_shared<jinja::Callable>();
  c->name = std::move(name);
  c->call = std::move(fn);
  return Value(std::shared_ptr<const jinja::Callable>(std::move(c)));
}

}  // namespace

Result<ChatTemplate> ChatTemplate::parse(std::string_view source) {
  try {
    auto tmpl = std::make_shared<jinja::Template>(jinja::parse_template(source));
    return ChatTemplate(std::move(tmpl));
  } catch (const jinja::SyntaxError& e) {
    return Error{"chat template line " + std::to_string(e.line) + ", column " + std::to_string(e.column) +
                 ": " + e.message};
  } catch (const std::exception& e) {
    return Error{std::string("chat template: internal error while parsing: ") + e.what()};
  }
}

std::string python_json_dumps(const nlohmann::ordered_json& value) {
  return jinja::json_dumps(to_value(value), jinja::JsonDumpOptions{});
}

Result<std::string> ChatTemplate::render(const nlohmann::ordered_json& messages,
                                         const ChatRenderOptions& options) const {
  if (!messages.is_array()) return Error{"chat template: messages must be a JSON array"};
  if (encoder_ != nullptr) return encoder_(messages, options);
  if (!options.extra_kwargs.is_null() && !options.extra_kwargs.is_object()) {
    return Error{"chat template: extra keyword arguments must be a JSON object"};
  }
  try {
    auto globals = std::make_shared<jinja::Frame>();
    auto& vars = globals->vars;
    for (auto& [name, value] : jinja::builtin_globals()) vars[name] = std::move(value);
    auto strftime_fn = options.strftime_now;
    vars["strftime_now"] = make_callable("strftime_now", [strftime_fn](jinja::Interpreter&, jinja::CallArgs&& args) {
      jinja::BoundArgs a("strftime_now", std::move(args), {"format"});
      const Value& format = a.required(0);
      if (!format.is_string()) throw jinja::RenderError("strftime_now() expects a format string");
      return Value(strftime_fn ? strftime_fn(format.as_string()) : local_strftime(format.as_string()));
    });
    if (!options.bos_token.empty()) vars["bos_token"] = Value(options.bos_token);
    if (!options.eos_token.empty()) vars["eos_token"] = Value(options.eos_token);
    if (options.extra_kwargs.is_object()) {
      for (const auto& [key, value] : options.extra_kwargs.items()) {
        if (key == "messages" || key == "tools" || key == "documents" || key == "add_generation_prompt") {
          return Error{"chat template: extra keyword argument '" + key + "' collides with a reserved variable"};
        }
        vars[key] = to_value(value);
      }
    }
    vars["messages"] = to_value(messages);
    vars["tools"] = options.tools.is_null() ? Value(jinja::None{}) : to_value(options.tools);
    vars["documents"] = Value(jinja::None{});
    vars["add_generation_prompt"] = Value(options.add_generation_prompt);
    jinja::Interpreter interpreter(jinja::RenderLimits{.max_operations = options.max_operations,
                                                       .max_output_bytes = options.max_output_bytes});
    return interpreter.render(*template_, std::move(globals));
  } catch (const jinja::RenderError& e) {
    return Error{std::string("chat template ") + e.what()};
  } catch (const std::exception& e) {
    // A bug or resource exhaustion (bad_alloc) must fail this request, not the server.
    return Error{std::string("chat template: internal error: ") + e.what()};
  }
}

}  // namespace sluice::api
