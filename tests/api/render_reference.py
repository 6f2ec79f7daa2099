#!/usr/bin/python3
"""Reference renderer for sluice's chat-template tests: Debian's python3-jinja2 set
up the way Hugging Face transformers' apply_chat_template sets it up
(ImmutableSandboxedEnvironment, trim_blocks, lstrip_blocks, loopcontrols, its own
tojson, raise_exception, strftime_now), with a fixed clock for determinism.

stdin:  {"cases": [case, ...]} where a case is either
          {"template": str, "context": {...}}                         (engine tests), or
          {"template": str, "messages": [...], "tools": ... | null,
           "add_generation_prompt": bool, "bos_token": str, "eos_token": str,
           "kwargs": {...}}                                           (chat tests)
stdout: [{"ok": true, "output": str} | {"ok": false, "stage": "parse"|"render",
          "error": str}, ...] as UTF-8 JSON.
"""
import json
import sys
from datetime import datetime

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

FIXED_NOW = datetime(2026, 7, 26, 13, 45, 7)


def raise_exception(message):
    raise jinja2.exceptions.TemplateError(message)


def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
    # Hugging Face replaces jinja2's HTML-safe tojson with plain json.dumps.
    return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                      sort_keys=sort_keys)


def strftime_now(format):
    return FIXED_NOW.strftime(format)


class GenerationTag(Extension):
    """HF's {% generation %} ... {% endgeneration %}: renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render"), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def make_env():
    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                       extensions=[GenerationTag, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env


_compiled = {}


def render(env, case):
    try:
        # Compiling dominates the run time, and chat tests reuse a few templates.
        source = case["template"]
        if source not in _compiled:
            _compiled[source] = env.from_string(source)
        template = _compiled[source]
    except Exception as e:  # noqa: BLE001 - any failure is a result to compare
        return {"ok": False, "stage": "parse", "error": "%s: %s" % (type(e).__name__, e)}
    if "context" in case:
        context = case["context"]
    else:
        # apply_chat_template: special tokens first, then the caller's kwargs.
        context = {}
        for key in ("bos_token", "eos_token"):
            if case.get(key):
                context[key] = case[key]
        context.update(case.get("kwargs") or {})
        context = dict(messages=case["messages"], tools=case.get("tools"), documents=None,
                       add_generation_prompt=case["add_generation_prompt"], **context)
    try:
        return {"ok": True, "output": template.render(**context)}
    except Exception as e:  # noqa: BLE001
        return {"ok": False, "stage": "render", "error": "%s: %s" % (type(e).__name__, e)}


def main():
    job = json.loads(sys.stdin.buffer.read().decode("utf-8"))
    env = make_env()
    results = [render(env, case) for case in job["cases"]]
    sys.stdout.buffer.write(json.dumps(results, ensure_ascii=False).encode("utf-8", "surrogatepass"))


if __name__ == "__main__":
    main()
