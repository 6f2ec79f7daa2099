#!/usr/bin/env python3
"""Per-chat decode rates and gaps inside the foreground window of `sluice bench serve --workload burst`.

    burst_chat_rates.py burst-POLICY.json...

Per report: the burst's duration, the long prompts' mean TTFT, each background chat's
tokens per second over its tokens inside the foreground window (mean and slowest; the pooled
rate, all chats' tokens over all their seconds there, weighs a chat that decoded for a moment
at the end no more than its moment), and the gaps between consecutive chat tokens there
(p50, p99, max, how many exceed 150 ms).
"""
import json
import sys

for path in sys.argv[1:]:
    report = json.load(open(path))
    summary = report["summary"]
    start, end = summary["foreground_start_ms"], summary["foreground_end_ms"]
    rates, gaps = [], []
    pooled_tokens, pooled_s = 0, 0.0
    for r in report["requests"]:
        if r["role"] == "foreground" or not r.get("token_ms"):
            continue
        times = [t for t in r["token_ms"] if start <= t <= end]
        if len(times) < 2:
            continue
        rates.append((len(times) - 1) / ((times[-1] - times[0]) / 1e3))
        pooled_tokens += len(times) - 1
        pooled_s += (times[-1] - times[0]) / 1e3
        gaps += [b - a for a, b in zip(times, times[1:])]
    gaps.sort()
    foreground = [r for r in report["requests"] if r["role"] == "foreground" and r["first_token_ms"]]
    ttft = [(r["first_token_ms"] - r["arrival_ms"]) / 1e3 for r in foreground]
    print(f"{path}: burst {summary['duration_ms'] / 1e3:.1f} s, mean TTFT {sum(ttft) / len(ttft):.1f} s, "
          f"{len(rates)} chats at {sum(rates) / len(rates):.1f} tok/s each (slowest {min(rates):.1f}, "
          f"pooled {pooled_tokens / pooled_s:.1f}), "
          f"gap p50 {gaps[len(gaps) // 2]:.0f} p99 {gaps[int(len(gaps) * 0.99)]:.0f} max {gaps[-1]:.0f} ms, "
          f"{sum(g > 150 for g in gaps)} gaps over 150 ms")
