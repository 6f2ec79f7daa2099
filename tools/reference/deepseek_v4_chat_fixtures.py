#!/usr/bin/python3
"""DeepSeek-V4 chat prompts from DeepSeek's own encoder, for sluice's
(src/sluice/api/deepseek_v4_chat.cpp) to be held to.

The encoder is encoding/encoding_dsv4.py of a DeepSeek-V4 checkpoint (not in
this repository). For each case of tests/api/deepseek_v4_chat_cases.json it
applies what sluice's server does before encoding (the request's tools join the
first system message, or an empty one put first; text parts of a content array
joined; chat_template_kwargs `thinking` / `enable_thinking` select thinking
mode, `reasoning_effort` max its preamble and low/medium/high none,
`drop_thinking` passes through) and writes the prompts to
tests/api/deepseek_v4_chat_expected.json.

    /usr/bin/python3 tools/reference/deepseek_v4_chat_fixtures.py --encoder DIR/encoding/encoding_dsv4.py
"""
import argparse
import copy
import importlib.util
import json
import os

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def load_encoder(path):
    spec = importlib.util.spec_from_file_location("encoding_dsv4", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def joined_parts(content):
    if isinstance(content, list):
        return "".join(part["text"] for part in content)
    return content


def prepared(case):
    messages = copy.deepcopy(case["messages"])
    for m in messages:
        if m["role"] != "tool" and "content" in m:
            m["content"] = joined_parts(m["content"])
    if case.get("tools"):
        system = next((m for m in messages if m["role"] == "system"), None)
        if system is None:
            system = {"role": "system", "content": ""}
            messages.insert(0, system)
        system["tools"] = case["tools"]
    return messages


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--encoder", required=True, help="encoding_dsv4.py of a DeepSeek-V4 checkpoint")
    args = parser.parse_args()
    encoder = load_encoder(args.encoder)
    with open(os.path.join(ROOT, "tests/api/deepseek_v4_chat_cases.json")) as f:
        cases = json.load(f)
    out = []
    for case in cases:
        kwargs = case.get("kwargs", {})
        thinking = bool(kwargs.get("thinking", kwargs.get("enable_thinking", False)))
        effort = "max" if kwargs.get("reasoning_effort") == "max" else None
        prompt = encoder.encode_messages(prepared(case), thinking_mode="thinking" if thinking else "chat",
                                         drop_thinking=kwargs.get("drop_thinking", True), reasoning_effort=effort)
        out.append({"name": case["name"], "prompt": prompt})
    path = os.path.join(ROOT, "tests/api/deepseek_v4_chat_expected.json")
    with open(path, "w") as f:
        json.dump({"encoder": "encoding/encoding_dsv4.py (DeepSeek-V4)", "prompts": out}, f, ensure_ascii=False,
                  indent=1)
        f.write("\n")
    print(f"{len(out)} prompts -> {path}")


if __name__ == "__main__":
    main()
