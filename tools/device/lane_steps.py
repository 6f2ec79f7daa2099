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

def read_steps(path):
    # A server stopped mid-write leaves a partial last line.
    steps = []
    for line in open(path):
        try:
            steps.append(json.loads(line))
        except json.JSONDecodeError:
            pass
    return steps


for path in sys.argv[1:]:
    steps = read_steps(path)
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

    lane_steps = [s for s in steps if s.get("lane") == "decode"]
    if not lane_steps:
        continue
    main = [s for s in steps if s.get("lane") == "main"]

    def beside(t):
        for m in main:
            if m["start_ms"] <= t <= m["start_ms"] + m["measured_ms"]:
                rows = sum(q[0] for q in m["seqs"])
                deepest = max(q[1] for q in m["seqs"])
                return f"main: {rows} rows, prefix <= {deepest}, {m['measured_ms']:.0f} ms"
        return "main: idle"

    slow = sorted(lane_steps, key=lambda s: -s["measured_ms"])[:8]
    print(f"  decode lane: {len(lane_steps)} steps, {sum(s['measured_ms'] > 150 for s in lane_steps)} over 150 ms")
    for s in slow:
        print(f"    step at {s['start_ms'] / 1e3:.2f} s: {s['measured_ms']:.0f} ms, {len(s['seqs'])} seqs, "
              f"longest context {max(q[1] for q in s['seqs'])} ({beside(s['start_ms'])})")
    waits = sorted(((b["start_ms"] - (a["start_ms"] + a["measured_ms"]), b) for a, b in zip(lane_steps, lane_steps[1:])),
                   key=lambda w: -w[0])[:5]
    for wait, s in waits:
        print(f"    waited {wait:.0f} ms before the step at {s['start_ms'] / 1e3:.2f} s ({beside(s['start_ms'] - wait)})")
