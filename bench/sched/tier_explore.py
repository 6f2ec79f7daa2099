#!/usr/bin/env python3
"""Host-tier policies under a device LRU, on the Mooncake trace at its own 512-token
granularity (one entry per hash id), requests one after another: a fast way to try a
host eviction or admission rule before writing it into kv/ (a few seconds per policy).

    python3 bench/sched/tier_explore.py TRACE [--half first|second|all]
        [--device-blocks 1367] [--host-blocks 15625] POLICY...

The device is an LRU of --device-blocks entries (0.7M tokens); what it evicts goes to the
host (exclusive tiers: a host hit moves the entry back to the device). A request hits the
longest prefix found in either tier. POLICY orders (and admits to) the host:
  lru                     least recently stored/used first
  arc                     ARC's two lists, by uses ever (1 vs more), split learnt from ghosts
  rank:W:B                evict the lowest clock + W x host_blocks x log2(uses ever) - B x depth
                          (kv's reuse-history ranking; clock = host inserts)
  admit2                  LRU, storing only keys used by 2+ requests so far
  tlfu[:strict]           LRU with TinyLFU's admission: a key is stored only if it was used at
                          least as often (strict: more often) as the host's LRU victim
  oracle[:N]              LRU, storing only keys some later request (within N requests) uses
                          (hindsight: an upper bound). --device-blocks 0 --host-blocks 1367
                          makes the host the only tier: admission to a 0.7M-token cache.
"""
import argparse
import collections
import heapq
import math

from trace_half import read_requests


def full_ids(r):
    return r["hash_ids"][: r["input_length"] // 512]


class LruHost:
    def __init__(self, cap, admit=None):
        self.c, self.cap, self.admit = collections.OrderedDict(), cap, admit

    def __contains__(self, i):
        return i in self.c

    def remove(self, i):
        del self.c[i]

    def insert(self, i, depth, t):
        if self.admit and not self.admit(i, t):
            return
        self.c[i] = 1
        while len(self.c) > self.cap:
            self.c.popitem(last=False)


class ArcHost:
    def __init__(self, cap, uses):
        self.cap, self.uses, self.p = cap, uses, cap / 2
        self.t1, self.t2 = collections.OrderedDict(), collections.OrderedDict()
        self.b1, self.b2 = collections.OrderedDict(), collections.OrderedDict()

    def __contains__(self, i):
        return i in self.t1 or i in self.t2

    def remove(self, i):
        self.t1.pop(i, None)
        self.t2.pop(i, None)

    def missed(self, i):
        if i in self.b1:
            self.p = min(self.cap, self.p + max(1, len(self.b2) / max(1, len(self.b1))))
            del self.b1[i]
        elif i in self.b2:
            self.p = max(0, self.p - max(1, len(self.b1) / max(1, len(self.b2))))
            del self.b2[i]

    def insert(self, i, depth, t):
        (self.t1 if self.uses[i] <= 1 else self.t2)[i] = 1
        while len(self.t1) + len(self.t2) > self.cap:
            src, ghost = (self.t1, self.b1) if self.t1 and (len(self.t1) > self.p or not self.t2) else (self.t2, self.b2)
            k, _ = src.popitem(last=False)
            ghost[k] = 1
            if len(ghost) > self.cap:
                ghost.popitem(last=False)


class TlfuHost:
    def __init__(self, cap, uses, strict):
        self.c, self.cap, self.uses, self.strict = collections.OrderedDict(), cap, uses, strict

    def __contains__(self, i):
        return i in self.c

    def remove(self, i):
        del self.c[i]

    def insert(self, i, depth, t):
        if len(self.c) >= self.cap:
            victim = next(iter(self.c))
            if self.uses[i] < self.uses[victim] or (self.strict and self.uses[i] == self.uses[victim]):
                return
            self.c.popitem(last=False)
        self.c[i] = 1


class RankHost:
    def __init__(self, cap, uses, w, b):
        self.cap, self.uses, self.w, self.b = cap, uses, w, b
        self.key, self.heap, self.clock = {}, [], 0

    def __contains__(self, i):
        return i in self.key

    def remove(self, i):
        del self.key[i]

    def insert(self, i, depth, t):
        self.clock += 1
        k = self.clock + self.w * self.cap * math.log2(max(1, self.uses[i])) - self.b * depth
        self.key[i] = k
        heapq.heappush(self.heap, (k, i))
        while len(self.key) > self.cap:
            k, j = heapq.heappop(self.heap)
            if self.key.get(j) == k:
                del self.key[j]


def run(reqs, device_blocks, host_blocks, policy):
    later = collections.defaultdict(list)  # hindsight, for the oracle only
    for t, r in enumerate(reqs):
        for i in full_ids(r):
            later[i].append(t)
    uses = collections.Counter()
    name, *args = policy.split(":")
    if name == "lru":
        host = LruHost(host_blocks)
    elif name == "arc":
        host = ArcHost(host_blocks, uses)
    elif name == "rank":
        host = RankHost(host_blocks, uses, float(args[0]), float(args[1]))
    elif name == "tlfu":
        host = TlfuHost(host_blocks, uses, bool(args and args[0] == "strict"))
    elif name == "admit2":
        host = LruHost(host_blocks, admit=lambda i, t: uses[i] >= 2)
    elif name == "oracle":
        horizon = int(args[0]) if args else len(reqs)
        host = LruHost(host_blocks, admit=lambda i, t: any(t < u <= t + horizon for u in later[i]))
    else:
        raise SystemExit(f"unknown policy {policy}")
    device, depth, hit, host_hit = collections.OrderedDict(), {}, 0, 0
    for t, r in enumerate(reqs):
        ids = full_ids(r)
        k = 0
        while k < len(ids) and (ids[k] in device or ids[k] in host):
            host_hit += ids[k] not in device
            k += 1
        hit += k
        if isinstance(host, ArcHost):
            for i in ids[k:]:
                host.missed(i)
        for d, i in enumerate(ids):
            uses[i] += 1
            depth[i] = d
            if i in host:
                host.remove(i)
        for i in reversed(ids):  # tail first: the start of a prompt is the most recent
            device[i] = 1
            device.move_to_end(i)
        while len(device) > device_blocks:
            i, _ = device.popitem(last=False)
            host.insert(i, depth[i], t)
    return hit * 512, host_hit * 512


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("trace")
    ap.add_argument("--half", default="first", choices=["first", "second", "all"])
    ap.add_argument("--device-blocks", type=int, default=1367)
    ap.add_argument("--host-blocks", type=int, default=15625)
    ap.add_argument("policies", nargs="+")
    a = ap.parse_args()
    reqs = read_requests(a.trace, a.half)
    total = sum(r["input_length"] for r in reqs)
    for p in a.policies:
        h, hh = run(reqs, a.device_blocks, a.host_blocks, p)
        print(f"{p:16s} {100.0 * h / total:6.2f}% of prompt tokens from cache ({100.0 * hh / total:.2f}% from the host)")


if __name__ == "__main__":
    main()
