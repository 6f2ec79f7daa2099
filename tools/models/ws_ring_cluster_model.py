#!/usr/bin/env python3
"""A random-interleaving model of the FP8 ws kernel's ring under
WsLoads::tma_weight_multicast2 (kernels/grouped_gemm_fp8_ws.cu): two blocks of
a cluster, a producer and two consumer warpgroups each, `full` (one lagged
producer arrival + transaction bytes) and `empty` (the 4 consumers of the
cluster) mbarriers a stage, TMA transfers landing at random times. Items are
shared pairs (each producer multicasts half the weight tile to both blocks),
cross-expert pairs (each block loads its own) and phantom pairs (rank 1 has
no rows and loads nothing). Checks: no deadlock, no stage written while a
consumer reads it, every consumed stage holds this use's A and both W halves,
no wait whose parity is ambiguous.

    ws_ring_cluster_model.py STAGES LAG single|overlap [RUNS]

6 3 (the kernel's) passes for both consumer forms; 4 3 overlap deadlocks (the
static_assert's bound); counting only the block's own consumers in `empty`
overwrites a stage in use.
"""
import random, sys

S, LAG = int(sys.argv[1]), int(sys.argv[2])
OVERLAP = sys.argv[3] == "overlap"

class Barrier:
    def __init__(s, count): s.count, s.pending, s.tx, s.done = count, count, 0, 0
    def check(s):
        if s.pending == 0 and s.tx == 0: s.done += 1; s.pending = s.count
    def arrive(s): assert s.pending > 0; s.pending -= 1; s.check()
    def expect(s, b): s.tx += b  # no arrival
    def complete(s, b): s.tx -= b; s.check()

def run(items, kb, seed):
    rng = random.Random(seed)
    full = [[Barrier(1) for _ in range(S)] for _ in range(2)]
    empty = [[Barrier(4) for _ in range(S)] for _ in range(2)]
    content = [[dict() for _ in range(S)] for _ in range(2)]  # (block, stage) -> {part: use}
    reading = [[0] * S for _ in range(2)]
    transfers = []  # (block, stage, part, use, bytes)
    def write(b, st, part, use):
        assert reading[b][st] == 0, f"stage {st} of block {b} written while read"
        content[b][st][part] = use
    def producer(b):
        g = 0
        for it in items:
            rows, shares, loads_w = it[b]
            for _ in range(kb):
                st = g % S
                if g >= S:
                    k = g // S - 1
                    while empty[b][st].done <= k: yield
                    assert empty[b][st].done == k + 1
                use = g // S
                tx = 16 if loads_w else 0  # W only: the model's A lands with the lagged arrival
                full[b][st].expect(tx)
                write(b, st, "A", use)  # cp.async A / scales (lands before the lagged arrival)
                if shares:
                    for q in (0, 1): transfers.append((q, st, f"W{b}", use, 8))
                elif loads_w:
                    transfers.append((b, st, "W0", use, 8)); transfers.append((b, st, "W1", use, 8))
                if g >= LAG: full[b][(g - LAG) % S].arrive()
                g += 1
                yield
        st = g % S
        if g >= S:
            k = g // S - 1
            while empty[b][st].done <= k: yield
        write(b, st, "A", g // S); content[b][st]["end"] = g // S
        if g >= LAG: full[b][(g - LAG) % S].arrive()
        g += 1
        for j in range(max(g - LAG, 0), g): full[b][j % S].arrive()
    def consumer(b, c):
        g = 0
        held = []
        def release(j):
            st = j % S; reading[b][st] -= 1
            for q in (0, 1): empty[q][st].arrive()
        for it in items + [None]:
            rows, shares, loads_w = it[b] if it else (0, 0, 0)
            n = kb if it else 1
            for i in range(n):
                j = g; st = j % S; k = j // S
                while full[b][st].done <= k: yield
                assert full[b][st].done == k + 1, "parity ambiguous"
                d = content[b][st]
                if it is None:
                    assert d.get("end") == k; return
                assert d["A"] == k, "A of another use"
                if loads_w or shares:
                    assert d.get("W0") == k and d.get("W1") == k, f"W incomplete {d} use {k}"
                reading[b][st] += 1
                held.append(j); g += 1
                yield
                while len(held) > (1 if OVERLAP else 0):
                    release(held.pop(0)); yield
            while held: release(held.pop(0)); yield
    procs = [producer(0), producer(1), consumer(0, 0), consumer(0, 1), consumer(1, 0), consumer(1, 1)]
    alive = list(range(6))
    steps = 0
    while alive or transfers:
        choices = [("p", i) for i in alive] + [("t", i) for i in range(len(transfers))]
        kind, i = rng.choice(choices)
        if kind == "t":
            b, st, part, use, by = transfers.pop(i)
            write(b, st, part, use); full[b][st].complete(by)
        else:
            try: next(procs[i])
            except StopIteration: alive.remove(i)
        steps += 1
        if steps > 200000: raise AssertionError("deadlock (no progress)")
    # all blocks' consumers exited: nothing left
    return steps

def items_for(pattern):
    # pattern entries: 's' shared pair, 'x' cross pair, 'p' phantom (rank 1 no rows)
    out = []
    for p in pattern:
        if p == "s": out.append([(128, True, True), (100, True, True)])
        elif p == "x": out.append([(40, False, True), (7, False, True)])
        else: out.append([(3, False, True), (0, False, False)])
    return out

ok = 0
for seed in range(int(sys.argv[4]) if len(sys.argv) > 4 else 3000):
    rng = random.Random(seed * 7 + 1)
    n = rng.randint(0, 6)
    pat = [rng.choice("sxp") for _ in range(n)]
    kb = rng.randint(1, 12)
    try:
        run(items_for(pat), kb, seed)
        ok += 1
    except AssertionError as e:
        print("FAIL", seed, pat, kb, e); break
print(f"S={S} LAG={LAG} overlap={OVERLAP}: {ok} runs ok")
