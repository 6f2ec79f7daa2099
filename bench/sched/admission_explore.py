#!/usr/bin/env python3
"""Admission to one 0.7M-token cache (the GPU tier alone), on the Mooncake trace at its own
512-token granularity (one entry per hash id), requests one after another: what session 10
tried before and beside kv's tinylfu policy (docs/benchmarks.md, "Session 10 - kv-admit").

    python3 bench/sched/admission_explore.py TRACE [--half first|second|all] [--blocks 1367] POLICY...

A request hits the longest prefix of its full blocks that the cache holds; then every block
of it is used (most recent: the prompt's start). POLICY:
  lru                       least recently used first
  rank:W:B                  kv's reuse-history order: evict the lowest clock + W x cache x log2(uses
                            ever) - B x depth (clock = block uses); W 48, B 110 are kv's defaults
  dk:F:T:W:B                a doorkeeper: keys used fewer than T times wait in an LRU window of
                            F x cache; the rest (the main cache) are ordered as rank:W:B
  wtlfu:F                   W-TinyLFU: an LRU window of F x cache in front of an LRU main cache;
                            the window's victim replaces the main's LRU block only if it was used
                            more often (exact counts, no ageing)
  irr:F:H                   LIRS-like: keys whose last re-reference came within H requests go to
                            the main LRU, the rest to an LRU window of F x cache
  learn:H:THETA:FEATS:F     an online predictor: per bucket of FEATS (c: uses so far, i: log2 of
                            the key's last re-reference interval, s: of the session's, the gap
                            since the request's deepest hit key was used), the share of uses
                            followed by another within H requests, learnt as the trace goes;
                            keys whose bucket's share is >= THETA go to the main LRU, the others to
                            an LRU window of F x cache
  oracle:H[:seen]           hindsight: only keys some request within the next H uses again are
                            kept (an upper bound for admission: 20.3% on the first half at H 500);
                            seen: and only keys an earlier request used (a doorkeeper's best case)
"""
import argparse
import bisect
import collections
import heapq
import math

from trace_half import read_requests


def full_ids(r):
    return r["hash_ids"][: r["input_length"] // 512]


def prefix_hit(ids, holds):
    k = 0
    while k < len(ids) and holds(ids[k]):
        k += 1
    return k


def run_lru(reqs, cap):
    c, hit = collections.OrderedDict(), 0
    for r in reqs:
        ids = full_ids(r)
        hit += prefix_hit(ids, lambda i: i in c)
        for i in reversed(ids):
            c[i] = 1
            c.move_to_end(i)
        while len(c) > cap:
            c.popitem(last=False)
    return hit


def run_dk(reqs, cap, window_fraction, threshold, w, b):
    wcap = max(1, int(cap * window_fraction)) if window_fraction > 0 else 0
    mcap = cap - wcap
    uses, win, main, heap, clock, hit = collections.Counter(), collections.OrderedDict(), {}, [], 0, 0
    for r in reqs:
        ids = full_ids(r)
        hit += prefix_hit(ids, lambda i: i in win or i in main)
        for i in ids:
            uses[i] += 1
        for d in reversed(range(len(ids))):
            i = ids[d]
            if i in main or uses[i] >= threshold:
                win.pop(i, None)
                clock += 1
                key = clock + w * mcap * math.log2(uses[i]) - b * d
                main[i] = key
                heapq.heappush(heap, (key, i))
            else:
                win[i] = 1
                win.move_to_end(i)
        while len(main) > mcap:
            key, j = heapq.heappop(heap)
            if main.get(j) == key:
                del main[j]
        while len(win) > wcap:
            win.popitem(last=False)
    return hit


def run_wtlfu(reqs, cap, window_fraction):
    wcap = max(1, int(cap * window_fraction))
    mcap = cap - wcap
    uses, win, main, hit = collections.Counter(), collections.OrderedDict(), collections.OrderedDict(), 0
    for r in reqs:
        ids = full_ids(r)
        hit += prefix_hit(ids, lambda i: i in win or i in main)
        for i in ids:
            uses[i] += 1
        for i in reversed(ids):
            if i in main:
                main.move_to_end(i)
            else:
                win[i] = 1
                win.move_to_end(i)
        while len(win) > wcap:
            cand, _ = win.popitem(last=False)
            if len(main) < mcap:
                main[cand] = 1
            elif uses[cand] > uses[next(iter(main))]:
                main.popitem(last=False)
                main[cand] = 1
    return hit


def bucket_log2(gap):
    return 0 if gap is None else 1 + min(int(math.log2(max(1, gap))), 12)


def run_windowed(reqs, cap, window_fraction, admit):
    """LRU window + LRU main; admit(t, ids, d, hit) says whether ids[d] goes to the main cache."""
    wcap = max(1, int(cap * window_fraction))
    mcap = cap - wcap
    win, main, hit = collections.OrderedDict(), collections.OrderedDict(), 0
    for t, r in enumerate(reqs):
        ids = full_ids(r)
        k = prefix_hit(ids, lambda i: i in win or i in main)
        hit += k
        for d in reversed(range(len(ids))):
            i = ids[d]
            to_main = i in main or admit(t, ids, d, k)
            main.pop(i, None)
            win.pop(i, None)
            (main if to_main else win)[i] = 1
        while len(main) > mcap:
            main.popitem(last=False)
        while len(win) > wcap:
            win.popitem(last=False)
    return hit


def irr_admit(horizon):
    last = {}

    def admit(t, ids, d, k):
        i = ids[d]
        gap = t - last[i] if i in last else None
        last[i] = t
        return gap is not None and gap <= horizon

    return admit


def learnt_admit(horizon, theta, feats):
    succ, tot = collections.Counter(), collections.Counter()
    pending, open_use, uses, last = collections.deque(), {}, collections.Counter(), {}
    state = {"t": -1, "session_gap": None}

    def admit(t, ids, d, k):
        if t != state["t"]:  # a new request: settle the uses that saw no reuse within the horizon
            state["t"] = t
            while pending and pending[0][0] < t - horizon:
                t0, i, b = pending.popleft()
                if open_use.get(i, (None,))[0] == t0:
                    tot[b] += 1
                    del open_use[i]
            state["session_gap"] = t - last[ids[k - 1]] if k > 1 and ids[k - 1] in last else None
        i = ids[d]
        if i in open_use:
            _, b = open_use.pop(i)
            tot[b] += 1
            succ[b] += 1
        gap = t - last[i] if i in last else None
        uses[i] += 1
        last[i] = t
        f = []
        if "c" in feats:
            f.append(min(uses[i], 8))
        if "i" in feats:
            f.append(bucket_log2(gap))
        if "s" in feats:
            f.append(bucket_log2(state["session_gap"]))
        b = tuple(f)
        open_use[i] = (t, b)
        pending.append((t, i, b))
        return (succ[b] + 1) / (tot[b] + 2) >= theta

    return admit


def run_oracle(reqs, cap, horizon, seen_only=False):
    later = collections.defaultdict(list)
    for t, r in enumerate(reqs):
        for i in full_ids(r):
            later[i].append(t)
    c, hit, seen = collections.OrderedDict(), 0, set()
    for t, r in enumerate(reqs):
        ids = full_ids(r)
        hit += prefix_hit(ids, lambda i: i in c)
        for i in reversed(ids):
            c.pop(i, None)
            u = later[i]
            j = bisect.bisect_right(u, t)
            if j < len(u) and u[j] - t <= horizon and (not seen_only or i in seen):
                c[i] = 1
        seen.update(ids)
        while len(c) > cap:
            c.popitem(last=False)
    return hit


def run(reqs, cap, policy):
    name, *a = policy.split(":")
    if name == "lru":
        return run_lru(reqs, cap)
    if name == "rank":
        return run_dk(reqs, cap, 0.0, 1, float(a[0]), float(a[1]))
    if name == "dk":
        return run_dk(reqs, cap, float(a[0]), int(a[1]), float(a[2]), float(a[3]))
    if name == "wtlfu":
        return run_wtlfu(reqs, cap, float(a[0]))
    if name == "irr":
        return run_windowed(reqs, cap, float(a[0]), irr_admit(int(a[1])))
    if name == "learn":
        return run_windowed(reqs, cap, float(a[3]), learnt_admit(int(a[0]), float(a[1]), a[2]))
    if name == "oracle":
        return run_oracle(reqs, cap, int(a[0]), len(a) > 1 and a[1] == "seen")
    raise SystemExit(f"unknown policy {policy}")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--half", default="first", choices=["first", "second", "all"])
    ap.add_argument("--blocks", type=int, default=1367)
    ap.add_argument("policies", nargs="+")
    a = ap.parse_args()
    reqs = read_requests(a.trace, a.half)
    total = sum(r["input_length"] for r in reqs)
    for p in a.policies:
        print(f"{p:24s} {100.0 * run(reqs, a.blocks, p) * 512 / total:6.2f}% of prompt tokens from cache", flush=True)


if __name__ == "__main__":
    main()
