#!/usr/bin/env python3
"""Eviction policies on the Mooncake trace, modelled at the trace's own 512-token
block granularity (one cache entry per hash id), requests replayed one after
another: a fast way to try a policy before writing it into kv/.

    python3 bench/sched/eviction_explore.py TRACE [--capacity-blocks 1367] POLICY...

POLICY: lru | slru[:protected_fraction] | belady | depth:BETA:HIT_BONUS
  depth: evict the smallest key = last use (request index) - BETA * depth
         (+ HIT_BONUS once the block was hit): deep blocks go first, since a hit
         on a deep block needs every block before it.
1367 blocks x 512 tokens = 0.7M tokens (DESIGN.md's one GPU of KV).
Hit rate = hit tokens / prompt tokens; partial last blocks never hit.
"""
import argparse
import collections
import heapq
import json


def full_ids(r):
    return r["hash_ids"][: r["input_length"] // 512]


def prefix_hits(ids, cached):
    k = 0
    for i in ids:
        if i not in cached:
            break
        k += 1
    return k


def lru(reqs, cap):
    c = collections.OrderedDict()
    hit = 0
    for r in reqs:
        ids = full_ids(r)
        hit += prefix_hits(ids, c) * 512
        for i in reversed(ids):  # tail first: the start of a prompt is the most recent
            c[i] = 1
            c.move_to_end(i)
        while len(c) > cap:
            c.popitem(last=False)
    return hit


def slru(reqs, cap, frac):
    prob, prot = collections.OrderedDict(), collections.OrderedDict()
    hit = 0
    for r in reqs:
        ids = full_ids(r)
        k = prefix_hits(ids, _Union(prob, prot))
        hit += k * 512
        for pos in range(len(ids) - 1, -1, -1):
            i = ids[pos]
            if pos < k or i in prot:
                prob.pop(i, None)
                prot[i] = 1
                prot.move_to_end(i)
            else:
                prob[i] = 1
                prob.move_to_end(i)
        while len(prot) > cap * frac:
            i, _ = prot.popitem(last=False)
            prob[i] = 1
        while len(prob) + len(prot) > cap:
            (prob if prob else prot).popitem(last=False)
    return hit


class _Union:
    def __init__(self, a, b):
        self.a, self.b = a, b

    def __contains__(self, x):
        return x in self.a or x in self.b


def belady(reqs, cap):
    uses = collections.defaultdict(list)
    for t, r in enumerate(reqs):
        for i in full_ids(r):
            uses[i].append(t)
    seen = collections.Counter()
    inf = 1 << 60
    cached, heap, hit = set(), [], 0
    for r in reqs:
        ids = full_ids(r)
        hit += prefix_hits(ids, cached) * 512
        for i in ids:
            seen[i] += 1
            nxt = uses[i][seen[i]] if seen[i] < len(uses[i]) else inf
            cached.add(i)
            heapq.heappush(heap, (-nxt, i))
        while len(cached) > cap:
            neg, i = heapq.heappop(heap)
            cur = uses[i][seen[i]] if seen[i] < len(uses[i]) else inf
            if i in cached and cur == -neg:
                cached.discard(i)
    return hit


def depth(reqs, cap, beta, hit_bonus):
    key, heap, was_hit, hit = {}, [], set(), 0
    for t, r in enumerate(reqs):
        ids = full_ids(r)
        k = prefix_hits(ids, key)
        hit += k * 512
        for d, i in enumerate(ids):
            if d < k:
                was_hit.add(i)
            kk = t - beta * d + (hit_bonus if i in was_hit else 0)
            key[i] = kk
            heapq.heappush(heap, (kk, i))
        while len(key) > cap:
            kk, i = heapq.heappop(heap)
            if key.get(i) == kk:
                del key[i]
                was_hit.discard(i)
    return hit


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--capacity-blocks", type=int, default=1367)
    ap.add_argument("policies", nargs="+")
    a = ap.parse_args()
    reqs = [json.loads(line) for line in open(a.trace) if line.strip()]
    total = sum(r["input_length"] for r in reqs)
    for p in a.policies:
        name, *args = p.split(":")
        if name == "lru":
            h = lru(reqs, a.capacity_blocks)
        elif name == "slru":
            h = slru(reqs, a.capacity_blocks, float(args[0]) if args else 0.5)
        elif name == "belady":
            h = belady(reqs, a.capacity_blocks)
        elif name == "depth":
            h = depth(reqs, a.capacity_blocks, float(args[0]), float(args[1]) if len(args) > 1 else 0.0)
        else:
            raise SystemExit(f"unknown policy {p}")
        print(f"{p:16s} {100.0 * h / total:6.2f}% of prompt tokens from cache")


if __name__ == "__main__":
    main()
