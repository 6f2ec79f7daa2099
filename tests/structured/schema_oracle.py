"""Reference verdicts for schema_acceptor_test.cpp: Debian's python3-jsonschema.

stdin: {"cases": [{"schema": {...}, "documents": ["<hex of the bytes>", ...]}, ...]}
stdout: one list per case of {"valid": bool, "narrowed": bool} per document.

valid: the text is one JSON value (RFC 8259: no NaN/Infinity, no duplicate
keys, nothing after the value) that validates against the schema, with
`integer` meaning an integer spelling (sluice never writes 1.0 for one).
narrowed: the text falls in the narrowing src/sluice/structured/json_schema.h
documents: a key, or a value the schema gives as enum/const, is not spelled as
json.dumps spells it (\\u0061 for "a", 1 for 1.0, 1e0 for 1), or a key holds
an escape. The acceptor may refuse these valid documents and no others: -0,
1.50 or \\u0061 anywhere else it must accept.
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


def canonical(value):
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def raw_tree(text):
    """The value of a valid JSON text with the raw spelling of each key and
    scalar: ("object", [(raw key, child)]), ("array", [child]) or
    ("scalar", raw text)."""
    pos = 0

    def skip_whitespace():
        nonlocal pos
        while pos < len(text) and text[pos] in " \t\n\r":
            pos += 1

    def string():
        nonlocal pos
        start = pos
        pos += 1
        while text[pos] != '"':
            pos += 2 if text[pos] == "\\" else 1
        pos += 1
        return text[start:pos]

    def value():
        nonlocal pos
        skip_whitespace()
        opener = text[pos]
        if opener in "{[":
            pos += 1
            children = []
            skip_whitespace()
            while text[pos] not in "}]":
                if opener == "{":
                    skip_whitespace()
                    key = string()
                    skip_whitespace()
                    pos += 1  # ':'
                    children.append((key, value()))
                else:
                    children.append(value())
                skip_whitespace()
                if text[pos] == ",":
                    pos += 1
            pos += 1
            return ("object" if opener == "{" else "array", children)
        if opener == '"':
            return ("scalar", string())
        start = pos
        while pos < len(text) and text[pos] not in " \t\n\r,]}":
            pos += 1
        return ("scalar", text[start:pos])

    return value()


def narrowed(schema, node):
    """Whether a key or an enum/const value under `schema` is spelled in a way
    the acceptor does not write (json_schema.h: the deliberate narrowings)."""
    kind, body = node
    if "enum" in schema or "const" in schema:
        values = schema["enum"] if "enum" in schema else [schema["const"]]
        return body not in {canonical(v) for v in values}
    if kind == "object":
        properties = schema.get("properties", {})
        additional = schema.get("additionalProperties", True)
        for raw_key, child in body:
            key = json.loads(raw_key)
            if "\\" in raw_key or raw_key != canonical(key):
                return True
            sub = properties.get(key, additional if isinstance(additional, dict) else {})
            if narrowed(sub, child):
                return True
    if kind == "array":
        return any(narrowed(schema.get("items", {}), child) for child in body)
    return False


def is_integer(checker, instance):
    return isinstance(instance, int) and not isinstance(instance, bool)


checker = jsonschema.Draft202012Validator.TYPE_CHECKER.redefine("integer", is_integer)
Validator = jsonschema.validators.extend(jsonschema.Draft202012Validator, type_checker=checker)


def verdict(validator, hex_bytes):
    try:
        text = bytes.fromhex(hex_bytes).decode("utf-8")
    except UnicodeDecodeError:
        return {"valid": False, "narrowed": False}
    if text != text.rstrip(" \t\n\r"):
        return {"valid": False, "narrowed": False}
    try:
        value = json.loads(text, object_pairs_hook=no_duplicates, parse_constant=refuse_constant)
    except (ValueError, RecursionError):
        return {"valid": False, "narrowed": False}
    if not validator.is_valid(value):
        return {"valid": False, "narrowed": False}
    return {"valid": True, "narrowed": narrowed(validator.schema, raw_tree(text))}


def main():
    job = json.load(sys.stdin)
    out = []
    for case in job["cases"]:
        validator = Validator(case["schema"])
        out.append([verdict(validator, d) for d in case["documents"]])
    json.dump(out, sys.stdout)


main()
