#!/usr/bin/env python3
"""Why online eviction sits at ~9% on a 0.7M-token cache where Belady reaches 22% (issue 17,
session 13): what Belady keeps that reuse history evicts, and how good a predictor of reuse would
have to be. The Mooncake trace at its own 512-token granularity (one entry per hash id), requests
one after another, as admission_explore.py and tier_explore.py do (docs/kv-tiers.md, "Session 13").

    python3 bench/sched/reuse_anatomy.py TRACE [--half first|second|all] [--blocks 1367] REPORT...

REPORT:
  hits        Belady, reuse history (kv's order: clock + 48 x cache x log2(uses) - 110 x depth)
              and LRU: hit blocks by the key's uses before the hit and the gap since its last use
  hazard      P(a key is used again within the next 50 requests | unused for a requests), by its
              uses so far: rising ages are where LRU's order is wrong
  features    P(used again within 300 requests) by one feature at a time, per uses-so-far class
  pen:A       reuse history for keys used twice or more; once-used keys below all of them,
              evicted newest first until the oldest is A requests old (A 0: oldest first), so
              the survivors live to their hazard peak (an MRU pen, as MRU beats LRU on a loop)
  density[:CLASSES[:RECALL:FPR]]
              hit-density eviction: per class, the reuse-gap curve of every key use is learnt
              online from a history of keys (not from the cache's own hits, which would only see
              ages the policy keeps); a cached key's value is the best hits per slot-request it
              can still earn, max over holding horizons; among 64 sampled leaves of the prefix
              tree the lowest goes. CLASSES, '+'-joined: uses (1, 2, 3, 4+), new (the request's
              blocks past its prefix hit, log4), session (requests since the deepest hit key's
              last use), output (log2 of the request's output length), oracle (whether some
              request within 500 uses the key again, hindsight; with RECALL:FPR a noisy bit, one
              coin per request). density:uses+oracle:0.8:0.1 says what a predictor of that
              quality would buy.
"""
import argparse
import bisect
import collections
import heapq
import math
import random

from trace_half import read_requests


def full_ids(r):
    return r["hash_ids"][: r["input_length"] // 512]


class Future:
    """Hindsight: the next request that uses a key."""

    def __init__(self, reqs):
        self.uses = collections.defaultdict(list)
        for t, r in enumerate(reqs):
            for i in full_ids(r):
                self.uses[i].append(t)

    def next_use(self, i, t):
        u = self.uses[i]
        j = bisect.bisect_right(u, t)
        return u[j] if j < len(u) else 1 << 40


def ranked_run(reqs, cap, score):
    """Evicts the lowest score(i, depth, t, uses) (lazy heap); returns (t, uses before, gap) per hit block."""
    cache, heap, hits, uses, last = {}, [], [], collections.Counter(), {}
    for t, r in enumerate(reqs):
        ids = full_ids(r)
        k = 0
        while k < len(ids) and ids[k] in cache:
            k += 1
        hits += [(t, uses[i], t - last[i]) for i in ids[:k]]
        for d, i in enumerate(ids):
            uses[i] += 1
            last[i] = t
            cache[i] = score(i, d, t, uses)
            heapq.heappush(heap, (cache[i], i))
        while len(cache) > cap:
            key, i = heapq.heappop(heap)
            if cache.get(i) == key:
                del cache[i]
    return hits


def report_hits(reqs, cap, total):
    future = Future(reqs)
    clock = [0]

    def reuse_history(i, d, t, uses):
        clock[0] += 1
        return clock[0] + 48 * cap * math.log2(uses[i]) - 110 * d

    runs = [
        ("belady", lambda i, d, t, uses: -(future.next_use(i, t) * 1000 + d)),
        ("reuse history", reuse_history),
        ("lru", lambda i, d, t, uses: (t, -d)),
    ]
    edges = [50, 100, 200, 400, 800]
    names = [f"<{e}" for e in edges] + [f">={edges[-1]}"]
    for name, score in runs:
        hits = ranked_run(reqs, cap, score)
        print(f"{name}: {len(hits)} hit blocks, {100.0 * len(hits) * 512 / total:.2f}% of prompt tokens")
        table = collections.Counter((min(u, 5), bisect.bisect_right(edges, g)) for _, u, g in hits)
        print("  uses before \\ gap (requests) " + " ".join(f"{n:>7s}" for n in names))
        for u in range(1, 6):
            label = f"{u}+" if u == 5 else f"{u} "
            print(f"  {label:29s}" + " ".join(f"{table[(u, b)]:7d}" for b in range(len(names))))


def report_hazard(reqs):
    horizon, step = 1600, 50
    last, uses, events = {}, collections.Counter(), []  # [t, uses so far, gap to the next use]
    for t, r in enumerate(reqs):
        for i in full_ids(r):
            uses[i] += 1
            if i in last:
                events[last[i]][2] = t - events[last[i]][0]
            last[i] = len(events)
            events.append([t, uses[i], None])
    end = len(reqs) - horizon
    for label, pick in (("1 use", lambda u: u == 1), ("2 uses", lambda u: u == 2), ("3+ uses", lambda u: u >= 3)):
        gaps = [g for t, u, g in events if pick(u) and t < end]
        row = []
        for a in range(0, horizon, step):
            alive = sum(1 for g in gaps if g is None or g >= max(a, 1))
            used = sum(1 for g in gaps if g is not None and max(a, 1) <= g < a + step)
            row.append(f"{a}:{100.0 * used / max(alive, 1):.1f}")
        print(f"{label} ({len(gaps)} uses; % used again in the next {step} requests, by age):")
        print("  " + " ".join(row))


def run_pen(reqs, cap, age_limit):
    uses, main, heap, clock, hit = collections.Counter(), {}, [], 0, 0
    once = collections.OrderedDict()  # once-used key -> request that used it, oldest first
    for t, r in enumerate(reqs):
        ids = full_ids(r)
        k = 0
        while k < len(ids) and (ids[k] in main or ids[k] in once):
            k += 1
        hit += k
        for i in ids:
            uses[i] += 1
        for d in reversed(range(len(ids))):
            i = ids[d]
            clock += 1
            if uses[i] == 1:
                once[i] = t
                once.move_to_end(i)
            else:
                once.pop(i, None)
                main[i] = clock + 48 * cap * math.log2(uses[i]) - 110 * d
                heapq.heappush(heap, (main[i], i))
        while len(main) + len(once) > cap:
            if once:
                oldest = next(iter(once))
                once.popitem(last=not (age_limit == 0 or t - once[oldest] > age_limit))
            else:
                key, j = heapq.heappop(heap)
                if main.get(j) == key:
                    del main[j]
    return hit


def log2_bucket(x):
    return None if x is None else min(int(math.log2(max(x, 1))), 10)


def report_features(reqs):
    future = Future(reqs)
    history, seen = collections.defaultdict(list), set()
    tables = collections.defaultdict(lambda: collections.defaultdict(lambda: [0, 0]))
    for t, r in enumerate(reqs[: len(reqs) - 400]):
        ids = full_ids(r)
        k = 0
        while k < len(ids) and ids[k] in seen:
            k += 1
        for d, i in enumerate(ids):
            h = history[i]
            h.append(t)
            if d == 0:
                continue
            used = future.next_use(i, t) - t <= 300
            feats = {
                "interval": log2_bucket(t - h[-2] if len(h) >= 2 else None),
                "new blocks": log2_bucket(len(ids) - k + 1),
                "length": log2_bucket(len(ids)),
                "output": log2_bucket(r["output_length"]),
                "position": int(4 * d / len(ids)),
            }
            for f, v in feats.items():
                cell = tables[(min(len(h), 4), f)][v]
                cell[0] += 1
                cell[1] += used
        seen.update(ids)
    for (u, f), table in sorted(tables.items()):
        n = sum(c[0] for c in table.values())
        p = sum(c[1] for c in table.values())
        cells = " ".join(
            f"{v}:{c[1] / c[0]:.2f}({c[0]})"
            for v, c in sorted(table.items(), key=lambda x: (x[0] is None, x[0] or 0))
            if c[0] >= 100
        )
        print(f"uses {u}{'+' if u == 4 else ' '} {f:10s} all {p / n:.2f} | {cells}")


def run_density(reqs, cap, classes, recall=1.0, fpr=0.0, bucket=16, num_buckets=64, samples=64):
    future = Future(reqs) if "oracle" in classes else None
    rnd = random.Random(1)
    sizes = {"uses": 4, "new": 5, "session": 4, "output": 12, "oracle": 2}
    num_classes = math.prod(sizes[c] for c in classes)
    reuse = [[0.0] * (num_buckets + 1) for _ in range(num_classes)]  # gap buckets; last: not within the horizon
    value = [[1.0] * num_buckets for _ in range(num_classes)]

    def refresh():
        for c in range(num_classes):
            r = reuse[c]
            alive = [0.0] * (num_buckets + 1)
            alive[num_buckets] = r[num_buckets]
            for b in range(num_buckets - 1, -1, -1):
                alive[b] = alive[b + 1] + r[b]
            for a in range(num_buckets):
                best, hits, life = 0.0, 0.0, 0.0
                for end in range(a, num_buckets):
                    hits += r[end]
                    life += r[end] * (end - a + 0.5)
                    best = max(best, hits / max(life + alive[end + 1] * (end + 1 - a), 1e-9))
                value[c][a] = best

    ghost, pending, uses, last = {}, collections.deque(), collections.Counter(), {}
    cache, depth, parent, kids = {}, {}, {}, collections.Counter()
    leaves, where = [], {}

    def add_leaf(i):
        if i not in where:
            where[i] = len(leaves)
            leaves.append(i)

    def drop_leaf(i):
        p = where.pop(i, None)
        if p is not None:
            tail = leaves.pop()
            if p < len(leaves):
                leaves[p] = tail
                where[tail] = p

    hit = 0
    for t, r in enumerate(reqs):
        ids = full_ids(r)
        while pending and pending[0][0] < t - bucket * num_buckets:
            t0, i = pending.popleft()
            g = ghost.get(i)
            if g and g[0] == t0:
                reuse[g[1]][num_buckets] += 1
                del ghost[i]
        k = 0
        while k < len(ids) and ids[k] in cache:
            k += 1
        hit += k
        session = t - last[ids[k - 1]] if k >= 2 else None
        coin = random.Random(t * 7919 + 13).random()
        for d, i in enumerate(ids):
            g = ghost.get(i)
            if g:
                reuse[g[1]][min((t - g[0]) // bucket, num_buckets - 1)] += 1
            if i not in cache:
                parent[i] = ids[d - 1] if d > 0 else None
                if d > 0:
                    kids[ids[d - 1]] += 1
                    drop_leaf(ids[d - 1])
                if kids[i] == 0:
                    add_leaf(i)
            uses[i] += 1
            last[i] = t
            c = 0
            for name in classes:
                if name == "uses":
                    v = min(uses[i], 4) - 1
                elif name == "new":
                    v = min(4, int(math.log2(max(len(ids) - k, 1))) // 2)
                elif name == "session":
                    v = 0 if session is None else 1 if session < 128 else 2 if session < 512 else 3
                elif name == "output":
                    v = min(int(math.log2(max(r["output_length"], 1))), 11)
                else:
                    soon = future.next_use(i, t) - t <= 500
                    v = int(coin < recall) if soon else int(coin < fpr)
                c = c * sizes[name] + v
            ghost[i] = (t, c)
            pending.append((t, i))
            cache[i] = (t, c)
            depth[i] = d
        while len(cache) > cap:
            best = None
            for _ in range(samples):
                j = leaves[rnd.randrange(len(leaves))]
                lt, c = cache[j]
                if lt == t:
                    continue
                s = (value[c][min((t - lt) // bucket, num_buckets - 1)], -depth[j])
                if best is None or s < best[0]:
                    best = (s, j)
            j = best[1] if best else leaves[rnd.randrange(len(leaves))]
            drop_leaf(j)
            p = parent.get(j)
            if p is not None and p in cache:
                kids[p] -= 1
                if kids[p] == 0:
                    add_leaf(p)
            del cache[j]
        if t % 100 == 0:
            for row in reuse:
                for b in range(len(row)):
                    row[b] *= 0.95
            refresh()
    return hit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--half", default="first", choices=["first", "second", "all"])
    ap.add_argument("--blocks", type=int, default=1367)
    ap.add_argument("reports", nargs="+")
    a = ap.parse_args()
    reqs = read_requests(a.trace, a.half)
    total = sum(r["input_length"] for r in reqs)
    for report in a.reports:
        name, *args = report.split(":")
        print(f"== {report}", flush=True)
        if name == "hits":
            report_hits(reqs, a.blocks, total)
        elif name == "hazard":
            report_hazard(reqs)
        elif name == "features":
            report_features(reqs)
        elif name == "pen":
            h = run_pen(reqs, a.blocks, int(args[0]) if args else 400)
            print(f"{100.0 * h * 512 / total:.2f}% of prompt tokens from cache")
        elif name == "density":
            classes = args[0].split("+") if args else ["uses"]
            noise = [float(x) for x in args[1:3]] if len(args) >= 3 else [1.0, 0.0]
            h = run_density(reqs, a.blocks, classes, *noise)
            print(f"{100.0 * h * 512 / total:.2f}% of prompt tokens from cache")
        else:
            raise SystemExit(f"unknown report {report}")


if __name__ == "__main__":
    main()
