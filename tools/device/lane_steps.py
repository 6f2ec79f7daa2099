#!/usr/bin/env python3
"""Where a burst's prefill time went, from a `--step-trace` file.

    lane_steps.py steps-POLICY.jsonl...

Prefill steps are those with a sequence of more than one new token; decode steps those whose
sequences all have one. Per file: the prefill steps' span from the first step of 2,048 rows
or more to the end of the last, the time they were running (busy) and not (idle), the decode
steps' median, and the decode steps (and seconds) after the last prefill step ended: the tail
that a burst's last prompt spends decoding.
"""
import json
import sys

for path in sys.argv[1:]:
    steps = [json.loads(line) for line in open(path)]
    prefill = [s for s in steps if any(q[0] > 1 for q in s["seqs"])]
    decode = [s for s in steps if s["seqs"] and all(q[0] == 1 for q in s["seqs"])]
    big = [s for s in prefill if sum(q[0] for q in s["seqs"]) >= 2048]
    if not big:
        print(f"{path}: no prefill step of 2,048 rows or more")
        continue
    first = big[0]["start_ms"]
    last_end = max(s["start_ms"] + s["measured_ms"] for s in big)
    busy = sum(s["measured_ms"] for s in prefill if s["start_ms"] >= first)
    tail = [s for s in decode if s["start_ms"] >= last_end]
    end = max(s["start_ms"] + s["measured_ms"] for s in steps)
    median = sorted(s["measured_ms"] for s in decode)[len(decode) // 2] if decode else 0.0
    print(f"{path}: {len(prefill)} prefill steps over {(last_end - first) / 1e3:.1f} s, busy "
          f"{busy / 1e3:.1f} s (idle {(last_end - first - busy) / 1e3:.1f} s); {len(decode)} decode steps, "
          f"median {median:.1f} ms; after the last prefill step: {len(tail)} decode steps, {(end - last_end) / 1e3:.1f} s")
