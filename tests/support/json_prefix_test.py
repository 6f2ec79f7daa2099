"""json_prefix.py on positive and negative cases (ctest json_prefix_oracle).

Positive: every byte prefix of hand-written documents and of 300 random ones
(json.dumps with and without indentation and \\u escapes, multi-byte
characters cut anywhere) is a prefix; the whole document is complete.
Negative: texts no bytes can complete.
"""
import importlib.util
import json
import os
import random
import unittest

spec = importlib.util.spec_from_file_location("json_prefix", os.path.join(os.path.dirname(__file__), "json_prefix.py"))
json_prefix = importlib.util.module_from_spec(spec)
spec.loader.exec_module(json_prefix)

DOCUMENTS = [
    '{"a": [1, -2.5e+3, true, false, null], "b": {"": ""}}',
    '  {"k\\"ey": "v\\\\al\\u00e9\\ud83d\\ude00\\n", "x" :[ [] , {} ]}\n',
    '[-0, 0.5, 1E-7, 12e3, "\\/", "日本語 😀"]',
    '"just a string"',
    "123",
    "-0.0",
    "true",
    "null",
    "[]",
    '{"nested": {"deeper": {"deepest": [[[{"a": 1}]]]}}}',
]

NOT_PREFIXES = [
    "{,", "[1,]", "[,", '{"a" 1', '{"a":}', '{"a":1 "b"', "{1", "{a", "{tr", "[1}", "{]", "]", "}",
    "01", "-01", "1.e", "1e.", "+1", ".5", "--1", "1-", "tru e", "nulll", "fals3", "[t,", "NaN", "Infinity", "-I",
    "1 2", "{} {", "[] x", '"a" "', '"\\x', '"\\u12g', '"\x01', '"a\tb',
]

NOT_PREFIX_BYTES = [b"\xff", b"\xe6", b'{"a":\xe6', b'"\xed\xa0', b'"\xc0', b'"\xe6(', b'"\xf4\x90']


def random_value(rng, depth):
    kind = rng.randrange(8 if depth < 4 else 5)
    if kind == 0:
        return None
    if kind == 1:
        return rng.random() < 0.5
    if kind == 2:
        return rng.randint(-10**12, 10**12)
    if kind == 3:
        return rng.uniform(-1e6, 1e6) * 10 ** rng.randint(-20, 20)
    if kind == 4:
        return "".join(rng.choice('ab"\\/\n\t é日😀\x01') for _ in range(rng.randrange(6)))
    if kind in (5, 6):
        return [random_value(rng, depth + 1) for _ in range(rng.randrange(4))]
    return {random_value(rng, 4) if rng.random() < 0.3 else "k": random_value(rng, depth + 1)
            for _ in range(rng.randrange(4))}


class JsonPrefixTest(unittest.TestCase):
    def check_every_prefix(self, data):
        for n in range(len(data)):
            self.assertTrue(json_prefix.verdict(data[:n])["prefix"], data[:n])
        self.assertEqual(json_prefix.verdict(data), {"prefix": True, "complete": True}, data)

    def test_hand_written_documents(self):
        for doc in DOCUMENTS:
            self.check_every_prefix(doc.encode("utf-8"))

    def test_random_documents(self):
        rng = random.Random(13)
        for i in range(300):
            value = {"k": random_value(rng, 1)} if i % 2 else random_value(rng, 0)
            text = json.dumps(value, ensure_ascii=rng.random() < 0.5, indent=rng.choice([None, 0, 2]))
            self.check_every_prefix(text.encode("utf-8"))

    def test_not_prefixes(self):
        for text in NOT_PREFIXES:
            self.assertEqual(json_prefix.verdict(text.encode("utf-8")), {"prefix": False, "complete": False}, text)
        for data in NOT_PREFIX_BYTES:
            self.assertEqual(json_prefix.verdict(data), {"prefix": False, "complete": False}, data)

    def test_complete_only_when_whole(self):
        self.assertEqual(json_prefix.verdict(b'{"a": 1'), {"prefix": True, "complete": False})
        self.assertEqual(json_prefix.verdict(b"12"), {"prefix": True, "complete": True})  # and a prefix of 123
        self.assertEqual(json_prefix.verdict(b"[1] "), {"prefix": True, "complete": True})


if __name__ == "__main__":
    unittest.main()
