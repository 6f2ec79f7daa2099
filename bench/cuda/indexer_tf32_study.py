#!/usr/bin/python3
# The DeepSeek-V4 indexer's head sum with tf32 inputs (docs/deepseek-v4-cuda.md,
# session 24: a tensor-core head sum would feed the relu'd scores to a tf32 MMA,
# which reads 10 mantissa bits): on random rows of V4-Flash's shape (64 heads x
# 128 dims, 32768 keys, top-512, e4m3-rounded q and k), how far the tf32 sums
# fall from the double-precision reference, and how many of the top-512 picks
# change. Random rows are not real ones (no structure, few near-ties): this is
# a first probe, not a proof.
#
#   /usr/bin/python3 bench/cuda/indexer_tf32_study.py
import numpy as np
rng = np.random.default_rng(7)
H, D, N, K = 64, 128, 32768, 512
def tf32(x):
    b = x.astype(np.float32).view(np.uint32) & np.uint32(0xFFFFE000)
    return b.view(np.float32)
def e4m3_like(x):  # 3 mantissa bits, round to nearest
    m, e = np.frexp(x)
    return np.ldexp(np.round(m * 16) / 16, e).astype(np.float32)
res = []
for trial in range(4):
    q = e4m3_like(rng.standard_normal((H, D)).astype(np.float32))
    k = e4m3_like(rng.standard_normal((N, D)).astype(np.float32))
    w = rng.standard_normal(H).astype(np.float32) / 8
    s = (k @ q.T).astype(np.float32)          # [N, H] exact-ish products
    r = np.maximum(s, 0)
    ref = (r.astype(np.float64) @ w.astype(np.float64))
    f32 = (r @ w).astype(np.float32)
    t32 = (tf32(r) @ w).astype(np.float32)
    top = lambda v: set(np.argpartition(-v, K)[:K])
    a, b, c = top(ref), top(f32), top(t32)
    rel = np.abs(t32 - ref) / (np.abs(r).astype(np.float64) @ np.abs(w))
    res.append((len(a & b) / K, len(a & c) / K, rel.max()))
for x in res: print("overlap f32 %.4f  tf32 %.4f  max err / sum|w relu| %.2e" % x)
