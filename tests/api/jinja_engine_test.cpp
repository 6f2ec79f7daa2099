// The Jinja engine against python3-jinja2 (configured like Hugging Face's
// apply_chat_template): every snippet below is rendered by both and must match
// byte for byte, or fail in both.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "reference_renderer.h"
#include "sluice/api/chat_template.h"

namespace sluice::api {
namespace {

struct Snippet {
  const char* name;
  const char* source;
  const char* context;  // JSON object: the template's variables
};

const std::vector<Snippet>& snippets() {
  static const std::vector<Snippet> kSnippets = {
      // ---- expressions and Python value printing
      {"arithmetic", "{{ 1 + 2 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }} {{ 7 / 2 }} {{ 2 ** 10 }} "
                     "{{ 1.5 * 2 }} {{ 10 / 4 }} {{ 7.5 // 2 }} {{ -7.5 % 2 }} {{ 2 ** 3 ** 2 }} {{ -2 ** 2 }}", "{}"},
      {"floats", "{{ 0.1 + 0.2 }} {{ 1e20 }} {{ 1e16 }} {{ 1e15 }} {{ 1e-7 }} {{ 0.0001 }} {{ 123456789.125 }} "
                 "{{ 3.0 }} {{ -0.0 }} {{ 1/3 }} {{ 2.5e-5 }} {{ x }} {{ y }}", R"({"x": 1.0, "y": 12345678901234567890.0})"},
      {"concat", "{{ 'a' ~ 1 ~ 2.5 ~ none ~ true ~ u ~ [1] }}", "{}"},
      {"repeat_and_join", "{{ 'ab' * 3 }} {{ [1, 2] + [3] }} {{ [1] * 2 }} {{ 3 * 'x' }}", "{}"},
      {"comparisons", "{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' < 'b' }} {{ [1,2] < [1,3] }} {{ 'x' in 'xyz' }} "
                      "{{ 2 not in [1,3] }} {{ 'k' in {'k': 1} }} {{ 'é' > 'z' }} {{ none == none }} {{ 1 != 2 }}", "{}"},
      {"logic", "{{ not x and y or z }}|{{ x or 'fallback' }}|{{ y and 'both' }}|{{ not none }}", R"({"x": 0, "y": "yes", "z": 5})"},
      {"inline_if", "{{ x if x else 'no' }}|{{ 'y' if false }}|{{ 'a' if 0 else 'b' if 1 else 'c' }}", R"({"x": ""})"},
      {"literals", "{{ (1, 2) }} {{ {'a': [1, {'b': none}], 'c': \"it's\"} }} {{ [] }} {{ {} }} {{ 'say \"hi\"' }} "
                   "{{ \"a\\nb\\tc\\\\\" }} {{ '\\u00e9\\x41' }} {{ 'adj' 'acent' }} {{ [true, false, none] }}", "{}"},
      {"repr_escapes", "{{ l }}", R"({"l": ["zero\u200bwidth", "nb\u00a0sp", "tab\t", "bell\u0007", "\ue000pua", "flag\ud83c\udff4\udb40\udc67\udb40\udc7f", "vs\ufe0f", "ok é 日本 😀", "quote'\"both"]})"},
      {"print_values", "{{ d }} {{ l }} {{ s }} {{ n }} {{ b }}",
       R"({"d": {"z": 1, "a": "x\ny", "q": "it's \"q\""}, "l": [1.5, "é", null], "s": "plain", "n": null, "b": false})"},
      {"slicing", "{{ s[1:3] }} {{ s[::-1] }} {{ l[-2:] }} {{ l[::2] }} {{ s[-1] }} {{ l[10] }}|{{ 'héllo'[1] }} "
                  "{{ 'héllo'|length }} {{ l[1:-1] }} {{ s[:100] }} {{ l[-100:1] }} {{ s[4:1:-1] }}",
       R"({"s": "abcdef", "l": [1, 2, 3, 4, 5]})"},
      {"attribute_item", "{{ d.a }} {{ d['a'] }} {{ d.missing }}|{{ l.0 }} {{ d.get('a') }} {{ d.get('zz', 5) }} "
                         "{{ d.get('zz') }} {{ d['items'] is defined }} {{ n.x }}", R"({"d": {"a": 1}, "l": ["x"], "n": null})"},
      {"dict_methods", "{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}{{ d.keys()|list }} {{ d.values()|list }}",
       R"({"d": {"b": 2, "a": 1, "c": [3]}})"},
      // ---- string methods
      {"strip_split", "[{{ '  hi  '.strip() }}][{{ 'xxhixx'.strip('x') }}][{{ ' a b  c '.split() }}][{{ 'a,b,,c'.split(',') }}]"
                      "[{{ 'a,b,c'.rsplit(',', 1) }}][{{ 'a,b,c'.split(',', 1) }}][{{ '  x '.lstrip() }}][{{ ' x  '.rstrip() }}]"
                      "[{{ s.strip() }}][{{ s|trim }}][{{ s.split() }}][{{ 'a\\nb'.split('\\n') }}]",
       R"({"s": "\u3000 hi\u00a0there\n"})"},
      {"case_methods", "{{ 'Hello World'.lower() }} {{ 'hello world'.upper() }} {{ 'hello wORLD'.title() }} "
                       "{{ 'hello'.capitalize() }} {{ 'ÉCOLE ñ straße'.lower() }} {{ 'école ñ'.upper() }} {{ \"it's o'neil\".title() }}", "{}"},
      {"misc_methods", "{{ 'abc'.startswith('a') }}{{ 'abc'.endswith(('x','c')) }}|{{ 'a-b-c'.replace('-', '+') }}|"
                       "{{ 'a-b-c'.replace('-', '+', 1) }}|{{ '{} and {}'.format(1, 'x') }}|{{ '{0}{name}'.format('z', name='n') }}|"
                       "{{ ', '.join(['a','b']) }}|{{ 'abcabc'.count('b') }}|{{ 'abc'.find('c') }}{{ 'abc'.find('z') }}|"
                       "{{ 'a\\nb\\r\\nc'.splitlines() }}|{{ '42'.isdigit() }}{{ 'ab'.isalpha() }}{{ ' '.isspace() }}|"
                       "{{ 'prefix-x'.removeprefix('prefix-') }}|{{ 'a=b=c'.partition('=') }}", "{}"},
      {"percent_format", "{{ '%s and %s' % (1, 'x') }}|{{ '%d%%' % 42.9 }}|{{ '%.2f' % 3.14159 }}|{{ '%(a)s-%(b)r' % {'a': 1, 'b': 'q'} }}|"
                         "{{ 'plain' % [1] }}|{{ '%s' % none }}|{{ '%r' % 'it\\'s' }}", "{}"},
      {"format_filter", "{{ '%s-%s'|format(1, 'a') }}|{{ '%(x)s!'|format(x=5) }}|{{ 'plain'|format }}", "{}"},
      {"percent_format_error", "{{ '%s %s' % (1,) }}", "{}"},
      // ---- filters
      {"filters_basic", "{{ '  x '|trim }}|{{ 'xyx'|trim('x') }}|{{ [1,2,3]|length }}|{{ 'héllo'|count }}|{{ {'a':1}|length }}|"
                        "{{ 'Ab'|upper }}{{ 'Ab'|lower }}|{{ 'aXa'|replace('a', 'b') }}|{{ 12|string }}{{ none|string }}|"
                        "{{ '42'|int + 1 }} {{ '4.7'|int }} {{ 'x'|int }} {{ 'x'|int(7) }} {{ 3.9|int }} {{ '3.5'|float }} {{ 2|float }}|"
                        "{{ -3|abs }} {{ -2.5|abs }}|{{ 'hello WORLD'|capitalize }}|{{ 'hello-world foo(bar) x'|title }}", "{}"},
      {"rounding", "{{ 2.5|round }} {{ 3.5|round }} {{ 3.14159|round(2) }} {{ 2.675|round(2) }} {{ 1.55|round(1, 'floor') }} "
                   "{{ 1.51|round(1, 'ceil') }} {{ 7|round }} {{ -0.5|round }}", "{}"},
      {"sequence_filters", "{{ [3,1,2]|sort }} {{ [3,1,2]|sort(reverse=true) }} {{ ['b','A','a']|sort }} "
                           "{{ ['b','A','a']|sort(case_sensitive=true) }} {{ [1,2,1,'a','A']|unique|list }} {{ [1,2,3]|reverse|list }} "
                           "{{ 'abc'|reverse }} {{ 'abc'|list }} {{ [4,5]|first }} {{ [4,5]|last }} {{ 'xyz'|first }} {{ []|first }}|"
                           "{{ [1,2,3]|sum }} {{ [1.5,2]|sum }} {{ [3,1,2]|max }} {{ [3,1,2]|min }} {{ ['a','B']|max }}",
       "{}"},
      {"attribute_filters", "{{ users|map(attribute='name')|join(', ') }}|{{ users|selectattr('admin')|map(attribute='name')|list }}|"
                            "{{ users|rejectattr('admin')|map(attribute='name')|list }}|"
                            "{{ users|selectattr('role', 'equalto', 'user')|list|length }}|"
                            "{{ users|selectattr('nick', 'defined')|map(attribute='nick')|list }}|"
                            "{{ users|rejectattr('nick', 'undefined')|list|length }}|"
                            "{{ users|selectattr('nick', 'none')|list|length }}|"
                            "{{ users|sort(attribute='age')|map(attribute='name')|join }}|"
                            "{{ users|map(attribute='missing', default='?')|join }}|{{ users|sum(attribute='age') }}|"
                            "{{ users|join(',', attribute='name') }}|{{ users|max(attribute='age') }}|"
                            "{{ users|unique(attribute='role')|map(attribute='name')|list }}",
       R"({"users": [{"name": "ann", "admin": true, "role": "admin", "age": 40, "nick": "A"},
                    {"name": "bob", "admin": false, "role": "user", "age": 30, "nick": null},
                    {"name": "cy", "role": "user", "age": 35}]})"},
      {"select_tests", "{{ [1,2,3,4]|select('odd')|list }} {{ [1,2,3,4]|reject('even')|list }} {{ [0,1,'',none,'x']|select|list }} "
                       "{{ ['a','b']|map('upper')|list }} {{ [1,2,3]|select('>', 1)|list }} {{ [1,2,3]|select('in', [2,3])|list }} "
                       "{{ ['a', 1, none]|select('string')|list }}", "{}"},
      {"mapping_filters", "{{ d|dictsort }} {{ d|dictsort(reverse=true) }} {{ d|dictsort(by='value') }} {{ d|items|list }} "
                          "{% for k, v in d|dictsort %}{{ k }}{{ v }}{% endfor %} {{ u|items|list }}",
       R"({"d": {"b": 2, "A": 3, "c": 1}})"},
      {"default_filter", "{{ u|default('dflt') }} {{ ''|default('e') }} {{ ''|default('e', true) }} {{ none|default('n') }} "
                         "{{ none|d('n', boolean=true) }} {{ x|default(1) }} {{ u|d }}", R"({"x": 0})"},
      {"indent_filter", "[{{ s|indent }}][{{ s|indent(2, true) }}][{{ s|indent('> ', first=true, blank=true) }}][{{ 'one'|indent(first=true) }}]",
       R"({"s": "a\n\nb\nc\n"})"},
      {"wordcount_escape", "{{ 'hello big world'|wordcount }} {{ 'a-b c_d'|wordcount }} {{ '<a href=\"x\">&\\'</a>'|e }} "
                           "{{ 'x'|center(5) }}| {{ 'ab'|center(5) }}| {{ [1,2,3,4,5]|batch(2)|list }} "
                           "{{ 'the quick brown fox jumps'|truncate(12, leeway=0) }}", "{}"},
      {"tojson", "{{ d|tojson }}\n{{ d|tojson(indent=2) }}\n{{ d|tojson(indent=4) }}\n{{ d|tojson(sort_keys=true) }}\n"
                 "{{ d|tojson(separators=(',', ':')) }}\n{{ d|tojson(ensure_ascii=true) }}\n{{ []|tojson(indent=2) }}{{ {}|tojson }}"
                 "{{ 'a\"b\\\\c\\u0001\\u007f'|tojson }}{{ 1.0|tojson }}{{ none|tojson }}{{ (1,2)|tojson }}",
       R"({"z": "é😀\n\t\"", "a": [1, 2.5, -0.0, 1e-7, 1e22, true, null, {}], "m": {"k": []}, "big": 9007199254740993})"},
      {"safe_and_string", "{{ '<b>'|safe }} {{ 5|string ~ '!' }} {{ [1, 'a']|string }}", "{}"},
      // ---- tests
      {"tests", "{{ u is defined }}{{ u is undefined }}{{ n is none }}{{ s is string }}{{ d is mapping }}{{ l is iterable }}"
                "{{ s is iterable }}{{ 5 is iterable }}{{ l is sequence }}{{ d is sequence }}{{ 1 is number }}{{ true is number }}"
                "{{ 1 is integer }}{{ true is integer }}{{ 1.0 is float }}{{ true is boolean }}{{ 1 is boolean }}{{ true is true }}"
                "{{ 1 is true }}{{ false is false }}{{ 2 is in [1,2] }}{{ 6 is divisibleby 3 }}{{ 3 is even }}{{ 3 is odd }}"
                "{{ 'a' is eq 'a' }}{{ 'ab' is lower }}{{ 'AB' is upper }}{{ range is callable }}{{ none is sameas none }}"
                "{{ s is not string }}{{ u is not defined }}{{ d is not none }}{{ 3 is gt 2 }}{{ 3 is lessthan(2) }}{{ 3 is ne 3 }}"
                "{{ 'upper' is filter }}{{ 'nope' is test }}{{ u is iterable }}{{ u is sequence }}",
       R"({"n": null, "s": "x", "d": {"a": 1}, "l": [1]})"},
      // ---- statements
      {"loop_variables", "{% for x in l %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                         "{{ loop.first }}{{ loop.last }}{{ loop.length }}[{{ loop.previtem }}|{{ loop.nextitem }}]"
                         "{{ loop.cycle('o', 'e') }}{{ loop.depth }};{% endfor %}", R"({"l": ["a", "b", "c"]})"},
      {"loop_control", "{% for x in range(10) %}{% if x == 2 %}{% continue %}{% endif %}{% if x > 5 %}{% break %}{% endif %}{{ x }}{% endfor %}|"
                       "{% for x in [] %}no{% else %}empty{% endfor %}|{% for x in range(6) if x is odd %}{{ x }}{{ loop.length }}{% endfor %}|"
                       "{% for a, b in [[1, 2], [3, 4]] %}{{ a + b }}{% endfor %}|{% for c in 'hé' %}<{{ c }}>{% endfor %}|"
                       "{% for k in {'x': 1, 'y': 2} %}{{ k }}{% endfor %}|{% for x in u %}never{% endfor %}|"
                       "{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }}{{ loop.index }}.{% endfor %}{% endfor %}|"
                       "{{ range(5, 0, -2)|list }} {{ range(0)|list }}", "{}"},
      {"scoping", "{% set x = 1 %}{% for i in range(3) %}{% if i == 1 %}{% set x = 5 %}{% endif %}[{{ x }}]{% endfor %}{{ x }}|"
                  "{% if true %}{% set y = 2 %}{% endif %}{{ y }}|{% set ns = namespace(total=0, items=[]) %}"
                  "{% for i in range(4) %}{% set ns.total = ns.total + i %}{% set ns.items = ns.items + [i] %}{% endfor %}"
                  "{{ ns.total }} {{ ns.items }} {{ ns.missing }}|{% set a, b = 1, 2 %}{{ a }}{{ b }}|{% set t = (3, 4) %}{{ t[1] }}", "{}"},
      {"self_reference", "{% set ns = namespace(n=1) %}{% set ns.me = ns %}{{ ns.me.me.n }}"
                         "{% macro m() %}{{ ns.n }}{% endmacro %}{% set ns.m = m %}{{ ns.m() }}", "{}"},
      {"namespace_forms", "{% set ns = namespace(a=1) %}{% set ns.b = 'x' %}{{ ns.a }}{{ ns.b }}"
                          "{% set n2 = namespace({'k': 'v'}, z=2) %}{{ n2.k }}{{ n2.z }}", "{}"},
      {"block_set", "{% set block %}  Hello {{ who }}  {% endset %}[{{ block }}]{% set t | trim | upper %}  shout  {% endset %}[{{ t }}]"
                    "{% filter upper %}quiet {{ who }}{% endfilter %}", R"({"who": "you"})"},
      {"macros", "{% macro greet(name, greeting='Hello', punct=none) %}{{ greeting }}, {{ name }}{{ punct or '!' }}{% endmacro %}"
                 "{{ greet('ann') }}|{{ greet('bob', 'Hi') }}|{{ greet(name='cy', punct='?') }}|{{ greet() }}|"
                 "{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1)|int }}{% endif %}{% endmacro %}{{ fact(5) }}|"
                 "{% macro uses_global() %}{{ g }}{% endmacro %}{% set g = 'late' %}{{ uses_global() }}|"
                 "{% macro render_tool(t, indent_by=2) %}{{ t.name|indent(indent_by, true) }}{% endmacro %}{{ render_tool({'name': 'f'}) }}", "{}"},
      {"whitespace_control", "a  {%- if true -%}  b  {%- endif -%}  c\n  {{- ' d ' -}}  \n e {# c #}  f {#- c -#}  g\n"
                             "    {% if true %}\n    inside\n    {% endif %}\n    {%+ if true %}kept{% endif %}\n"
                             "  {{ 'var' }}\n{% if true +%}\nnot trimmed{% endif %}\n{% raw %}{{ raw }}{% endraw %}\n"
                             "  {# indented comment #}\nend\n", "{}"},
      {"whitespace_lines", "{% for m in l %}\n  {% if m %}\n    <{{ m }}>\n  {% endif %}\n{% endfor %}\n\ntrailing\n", R"({"l": [1, 0, 2]})"},
      {"whitespace_mixed", "x\n{%- for i in range(2) %}\n  {{ i }}\n{%- endfor %}\n{{ 'y' }}  \n  {%- set z = 1 %}\n{{ z }}\n", "{}"},
      {"strftime", "{{ strftime_now('%Y-%m-%d %H:%M:%S') }} {{ strftime_now('%d %B %Y') }} {{ strftime_now('%A %j') }}", "{}"},
      {"generation_tag", "{% generation %}gen {{ 1 }}{% endgeneration %}", "{}"},
      // ---- Undefined and errors (these must fail, or not, exactly as in jinja2)
      {"undefined_print", "[{{ u }}][{{ u|length }}][{{ u ~ 'a' }}][{{ u == u }}][{{ u|trim }}][{{ 'x' in u }}][{{ u|string }}]"
                          "[{{ u|list }}][{{ d.missing is defined }}][{{ u|default('z') }}]", R"({"d": {}})"},
      {"undefined_attr_error", "{{ u.x }}", "{}"},
      {"undefined_nested_error", "{{ d.missing.x }}", R"({"d": {}})"},
      {"undefined_math_error", "{{ u + 1 }}", "{}"},
      {"undefined_compare_error", "{{ u < 1 }}", "{}"},
      {"undefined_tojson_error", "{{ u|tojson }}", "{}"},
      {"undefined_call_error", "{{ u() }}", "{}"},
      {"none_iteration_error", "{% for x in n %}{% endfor %}", R"({"n": null})"},
      {"type_error", "{{ 'a' + 1 }}", "{}"},
      {"none_length_error", "{{ n|length }}", R"({"n": null})"},
      {"raise_exception", "before{{ raise_exception('Conversation roles must alternate') }}", "{}"},
      {"range_too_big", "{% for i in range(200000) %}{% endfor %}", "{}"},
      {"sandbox_append", "{% set l = [1] %}{{ l.append(2) }}", "{}"},
      {"sandbox_update", "{% set d = {} %}{{ d.update({'a': 1}) }}", "{}"},
      {"set_attr_non_namespace", "{% set d = {} %}{% set d.x = 1 %}", "{}"},
      {"zero_division", "{{ 1 / 0 }}", "{}"},
      {"unknown_string_method", "{{ 'x'.frobnicate() }}", "{}"},
      {"macro_too_many_args", "{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", "{}"},
      {"inline_if_no_else_used", "{{ ('x' if false) ~ 'y' }} {{ ('x' if false) is defined }}", "{}"},
      {"missing_list_element", "[{{ l[5] }}]{{ l[5] is defined }}", R"({"l": [1]})"},
      {"missing_list_element_attr_error", "{{ l[5].x }}", R"({"l": [1]})"},
      // ---- parse errors: both must refuse at parse time
      {"parse_unclosed_if", "{% if x %}never closed", "{}"},
      {"parse_unclosed_var", "{{ x ", "{}"},
      {"parse_unknown_tag", "line1\n{% frobnicate %}", "{}"},
      {"parse_unknown_filter", "{{ x|frobnicate }}", "{}"},
      {"parse_unknown_test", "{{ x is frobnicated }}", "{}"},
      {"parse_stray_endfor", "{% endfor %}", "{}"},
      {"parse_bad_expression", "{{ 1 + }}", "{}"},
      {"parse_unclosed_comment", "{# never", "{}"},
      {"parse_unterminated_string", "{{ 'abc }}", "{}"},
      {"parse_break_outside_loop", "{% break %}", "{}"},
      {"parse_raw_plus_end", "{% raw +%}x{% endraw %}", "{}"},
      // ---- lexer corner cases
      {"comment_at_end", "a{#", "{}"},
      {"raw_forms", "{% raw %}\nX{% endraw %}|{% raw -%}  \n X{% endraw +%}\nY|a\n  {% raw %}Z\n  {% endraw %}\nW", "{}"},
      {"crlf_text", "a\r\n{% if true %}\r\n  b\r\n{% endif %}\r\nc\r\n", "{}"},
      {"braces_in_text", "{ {{ '{' }} }{% if true %}{ }{% endif %}{{ {'a': {'b': 1}} }}", "{}"},
  };
  return kSnippets;
}

std::string fixed_strftime(std::string_view format) {
  std::tm t{};
  t.tm_year = 2026 - 1900;
  t.tm_mon = 6;
  t.tm_mday = 26;
  t.tm_hour = 13;
  t.tm_min = 45;
  t.tm_sec = 7;
  t.tm_wday = 0;   // 26 July 2026 is a Sunday
  t.tm_yday = 206;
  char buf[256];
  const std::size_t n = std::strftime(buf, sizeof(buf), std::string(format).c_str(), &t);
  return std::string(buf, n);
}

TEST(JinjaEngine, MatchesPythonJinja2) {
  nlohmann::ordered_json cases = nlohmann::ordered_json::array();
  for (const Snippet& s : snippets()) {
    cases.push_back({{"template", s.source}, {"context", nlohmann::ordered_json::parse(s.context)}});
  }
  auto reference = testing::render_with_python(cases);
  ASSERT_TRUE(reference.ok()) << reference.error_message();
  int num_matched_outputs = 0;
  int num_matched_errors = 0;
  for (std::size_t i = 0; i < snippets().size(); ++i) {
    const Snippet& s = snippets()[i];
    const testing::ReferenceResult& expected = (*reference)[i];
    SCOPED_TRACE(std::string("snippet ") + s.name + "\n" + s.source);
    auto parsed = ChatTemplate::parse(s.source);
    if (!expected.ok && expected.stage == "parse") {
      EXPECT_FALSE(parsed.ok()) << "jinja2 refused it at parse time: " << expected.error;
      if (!parsed.ok()) ++num_matched_errors;
      continue;
    }
    ASSERT_TRUE(parsed.ok()) << parsed.error_message();
    ChatRenderOptions options;
    options.extra_kwargs = nlohmann::ordered_json::parse(s.context);
    options.strftime_now = fixed_strftime;
    auto rendered = parsed->render(nlohmann::ordered_json::array(), options);
    if (expected.ok) {
      ASSERT_TRUE(rendered.ok()) << rendered.error_message();
      EXPECT_EQ(*rendered, expected.output);
      if (rendered.ok() && *rendered == expected.output) ++num_matched_outputs;
    } else {
      EXPECT_FALSE(rendered.ok()) << "jinja2 raised " << expected.error << " but sluice rendered: " << *rendered;
      if (!rendered.ok()) ++num_matched_errors;
    }
  }
  std::printf("jinja snippets: %d outputs identical, %d errors in both, of %zu\n", num_matched_outputs,
              num_matched_errors, snippets().size());
}

}  // namespace
}  // namespace sluice::api
