"""JSON-prefix oracle for the JSON-mode tests (C++ and e2e): is a text a
prefix of some JSON document, and is it a whole one? Independent of
src/sluice/structured: Python's json module is the judge.

stdin: {"texts": ["<hex of the bytes>", ...]}
stdout: one {"prefix": bool, "complete": bool} per text.

complete: the bytes are UTF-8 and one JSON value (RFC 8259: no NaN or
Infinity; surrounding whitespace allowed). prefix: some bytes appended make a
complete document. A scan of where the text stops (inside a string, an escape,
a key, a number or a literal, after ':' or ',', and which brackets are open)
builds one such suffix; json.loads decides whether text + suffix is a
document. So "prefix" is never said of a text that is not one; a wrong suffix
could only refuse a true prefix, and json_prefix_test.py checks every prefix of
many documents for that.
"""
import codecs
import json
import sys

LITERALS = ("true", "false", "null")
CLOSERS = {"{": "}", "[": "]"}


def refuse_constant(name):
    raise ValueError(name)


def is_document(text):
    try:
        json.loads(text, parse_constant=refuse_constant)
        return True
    except (ValueError, RecursionError):
        return False


def suffix_for(text, cut_character):
    """A suffix that makes `text` a document if it is a prefix of one; None
    when it plainly is not. `cut_character`: the bytes went on into a
    character that they cut off (dropped from `text`), which only a string's
    body can hold."""
    stack = []
    in_string = False
    string_is_key = False  # the string open now, or the last one closed
    escape = None  # inside a string: the escape after its backslash so far
    last = ""  # the last character outside strings, whitespace aside ('"' after a string)
    word = ""  # a number or literal the text ends in, unless whitespace followed it
    for c in text:
        if in_string:
            if escape is not None:
                escape += c
                if escape[0] != "u" or len(escape) == 5:
                    escape = None
            elif c == "\\":
                escape = ""
            elif c == '"':
                in_string = False
                last = '"'
            continue
        if c in " \t\n\r":
            word = ""
            continue
        if c == '"':
            in_string = True
            string_is_key = bool(stack) and stack[-1] == "{" and last in ("{", ",")
            word = ""
            continue
        if c in "{[":
            stack.append(c)
        elif c in "}]":
            if not stack or CLOSERS[stack.pop()] != c:
                return None
        if c in "{[}]:,":
            word = ""
        else:
            word += c
        last = c
    if cut_character and not (in_string and escape is None):
        return None
    suffix = ""
    if in_string:
        if escape == "":
            suffix += "n"
        elif escape is not None:
            suffix += "0" * (5 - len(escape))
        suffix += '"'
        if string_is_key:
            suffix += ":0"
    elif word:
        if word[0] == "-" or word[0].isdigit():
            if word[-1] in "-+.eE":
                suffix += "0"
        else:
            literal = next((lit for lit in LITERALS if lit.startswith(word)), None)
            if literal is None:
                return None
            suffix += literal[len(word):]
    elif last == '"' and string_is_key:
        suffix += ":0"
    elif last == "," and stack and stack[-1] == "{":
        suffix += '"":0'
    elif last in ("", ":", ","):
        suffix += "0"
    return suffix + "".join(CLOSERS[b] for b in reversed(stack))


def decodes(data):
    try:
        data.decode("utf-8")
        return True
    except UnicodeDecodeError:
        return False


def can_finish_character(cut):
    """Whether continuation bytes make `cut`, the first bytes of a UTF-8
    character, a whole one. Python's incremental decoder keeps some that none
    can (ED A0: a surrogate); only the second byte's range depends on the
    first, so one free byte and then 0x80s try every case."""
    return any(decodes(cut + bytes([b]) + b"\x80" * n) for b in range(0x80, 0xC0) for n in range(3))


def verdict(data):
    decoder = codecs.getincrementaldecoder("utf-8")()
    try:
        text = decoder.decode(data, final=False)
    except UnicodeDecodeError:
        return {"prefix": False, "complete": False}
    cut = decoder.getstate()[0]
    if cut and not can_finish_character(cut):
        return {"prefix": False, "complete": False}
    cut_character = bool(cut)
    complete = not cut_character and is_document(text)
    suffix = suffix_for(text, cut_character)
    prefix = complete or (suffix is not None and is_document(text + suffix))
    return {"prefix": prefix, "complete": complete}


def main():
    job = json.load(sys.stdin)
    json.dump([verdict(bytes.fromhex(t)) for t in job["texts"]], sys.stdout)


if __name__ == "__main__":
    main()
