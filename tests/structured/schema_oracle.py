"""Reference verdicts for schema_acceptor_test.cpp: Debian's python3-jsonschema.

stdin: {"cases": [{"schema": {...}, "documents": ["<hex of the bytes>", ...]}, ...]}
stdout: one list per case of {"valid": bool, "respelled": bool} per document.

valid: the text is one JSON value (RFC 8259: no NaN/Infinity, no duplicate
keys, nothing after the value) that validates against the schema, with
`integer` meaning an integer spelling (sluice never writes 1.0 for one).
respelled: the text, whitespace aside, is not the canonical compact spelling
of its value (json.dumps): -0, 1.50, \\u0061, ... The acceptor matches enum
values and keys in their canonical spelling only, so these may be refused.
"""
import json
import sys

import jsonschema


def no_duplicates(pairs):
    keys = [k for k, _ in pairs]
    if len(keys) != len(set(keys)):
        raise ValueError("duplicate key")
    return dict(pairs)


def refuse_constant(name):
    raise ValueError(name)


def strip_whitespace(text):
    out, in_string, escape = [], False, False
    for c in text:
        if in_string:
            out.append(c)
            if escape:
                escape = False
            elif c == "\\":
                escape = True
            elif c == '"':
                in_string = False
        elif c in " \t\n\r":
            continue
        else:
            out.append(c)
            in_string = c == '"'
    return "".join(out)


def is_integer(checker, instance):
    return isinstance(instance, int) and not isinstance(instance, bool)


checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", is_integer)
Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=checker)


def verdict(validator, hex_bytes):
    try:
        text = bytes.fromhex(hex_bytes).decode("utf-8")
    except UnicodeDecodeError:
        return {"valid": False, "respelled": False}
    if text != text.rstrip(" \t\n\r"):
        return {"valid": False, "respelled": False}
    try:
        value = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return {"valid": False, "respelled": False}
    canonical = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
    return {"valid": validator.is_valid(value), "respelled": canonical != strip_whitespace(text)}


def main():
    job = json.load(sys.stdin)
    out = []
    for case in job["cases"]:
        validator = Validator(case["schema"])
        out.append([verdict(validator, d) for d in case["documents"]])
    json.dump(out, sys.stdout)


main()
