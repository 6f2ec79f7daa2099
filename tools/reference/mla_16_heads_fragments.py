#!/usr/bin/python3
"""Checks the 16-head MLA decode kernel's fragment addressing on the CPU.

kernels/mla_decode_16_heads.cu reads K and V with ldmatrix from a 32-key tile
that TMA wrote in the 128-byte swizzle (row r keeps 16-byte chunk c of its
64-dim panel at (c ^ r % 8) x 16 bytes), and multiplies on mma.sync m16n8k16.
This emulates ldmatrix x4 (and .trans) and the MMA's fragment layouts over the
kernel's own address expressions, and compares S = Q K^T and O = P V with
numpy. Run: /usr/bin/python3 tools/reference/mla_16_heads_fragments.py
"""
import numpy as np

KEYS, WIDTH, HEADS, RANK = 32, 576, 16, 512
PANEL = 2048  # bf16 elements a 64-dim panel of 32 rows
Q_STRIDE, P_STRIDE = WIDTH + 8, KEYS + 8


def ldmatrix_x4(memory, row_starts, trans=False):
    """regs[lane][m]: the pair of b16 values lane gets from matrix m (rows from lanes 8m..8m+7)."""
    regs = [[None] * 4 for _ in range(32)]
    for m in range(4):
        mat = np.array([memory[row_starts[8 * m + i]:row_starts[8 * m + i] + 8] for i in range(8)])
        for lane in range(32):
            r, c = lane // 4, 2 * (lane % 4)
            regs[lane][m] = (mat[c, r], mat[c + 1, r]) if trans else (mat[r, c], mat[r, c + 1])
    return regs


def mma_16816(acc, a, b0, b1):
    """acc[lane] += the m16n8k16 product of the A fragments a[lane] and B fragments b0/b1[lane]."""
    a_mat, b_mat = np.zeros((16, 16)), np.zeros((16, 8))
    for lane in range(32):
        g, t = lane // 4, lane % 4
        a_mat[g, 2 * t:2 * t + 2], a_mat[g + 8, 2 * t:2 * t + 2] = a[lane][0], a[lane][1]
        a_mat[g, 2 * t + 8:2 * t + 10], a_mat[g + 8, 2 * t + 8:2 * t + 10] = a[lane][2], a[lane][3]
        b_mat[2 * t:2 * t + 2, g], b_mat[2 * t + 8:2 * t + 10, g] = b0[lane], b1[lane]
    d = a_mat @ b_mat
    for lane in range(32):
        g, t = lane // 4, lane % 4
        acc[lane] = [acc[lane][0] + d[g, 2 * t], acc[lane][1] + d[g, 2 * t + 1],
                     acc[lane][2] + d[g + 8, 2 * t], acc[lane][3] + d[g + 8, 2 * t + 1]]


def fragments(regs, i, j):
    return [regs[lane][i] for lane in range(32)], [regs[lane][j] for lane in range(32)]


def main():
    rng = np.random.default_rng(0)
    keys = rng.standard_normal((KEYS, WIDTH)).astype(np.float32)
    q = rng.standard_normal((HEADS, WIDTH)).astype(np.float32)
    p = rng.standard_normal((HEADS, KEYS)).astype(np.float32)
    tile = np.zeros(9 * PANEL, np.float32)
    for r in range(KEYS):
        for panel in range(9):
            for c in range(8):
                at = panel * PANEL + r * 64 + (c ^ (r % 8)) * 8
                tile[at:at + 8] = keys[r, panel * 64 + c * 8:panel * 64 + c * 8 + 8]
    q_smem = np.zeros(HEADS * Q_STRIDE, np.float32)
    p_smem = np.zeros(HEADS * P_STRIDE, np.float32)
    for r in range(HEADS):
        q_smem[r * Q_STRIDE:r * Q_STRIDE + WIDTH] = q[r]
        p_smem[r * P_STRIDE:r * P_STRIDE + KEYS] = p[r]

    s = np.zeros((HEADS, KEYS))
    o = np.zeros((HEADS, RANK))
    for warp in range(8):
        half, key_group = warp // 4, warp % 4
        # S: the warp's Q fragments, 18 k-steps of its half of the dims; K two k-steps a load.
        q_frag = [ldmatrix_x4(q_smem, [(lane % 16) * Q_STRIDE + half * 288 + ks * 16 + (lane // 16) * 8
                                       for lane in range(32)]) for ks in range(18)]
        acc = [[[0.0] * 4 for _ in range(32)] for _ in range(4)]
        for j in range(9):
            starts = []
            for lane in range(32):
                key, chunk = key_group * 8 + lane % 8, half * 36 + 4 * j + lane // 8
                starts.append((chunk // 8) * PANEL + key * 64 + ((chunk % 8) ^ (lane % 8)) * 8)
            b = ldmatrix_x4(tile, starts)
            mma_16816(acc[(2 * j) % 4], q_frag[2 * j], *fragments(b, 0, 1))
            mma_16816(acc[(2 * j + 1) % 4], q_frag[2 * j + 1], *fragments(b, 2, 3))
        for lane in range(32):
            for h in range(2):
                for e in range(2):
                    s[lane // 4 + 8 * h, key_group * 8 + 2 * (lane % 4) + e] += sum(a[lane][2 * h + e] for a in acc)
        # P V: the warp's panel of O, V read transposed.
        out = [[[0.0] * 4 for _ in range(32)] for _ in range(8)]
        for kk in range(2):
            pf = ldmatrix_x4(p_smem, [(lane % 16) * P_STRIDE + kk * 16 + (lane // 16) * 8 for lane in range(32)])
            pf = [pf[lane] for lane in range(32)]
            for n in range(0, 8, 2):
                starts = []
                for lane in range(32):
                    key = kk * 16 + lane % 8 + ((lane // 8) % 2) * 8
                    starts.append(warp * PANEL + key * 64 + ((n + lane // 16) ^ (key % 8)) * 8)
                v = ldmatrix_x4(tile, starts, trans=True)
                mma_16816(out[n], pf, *fragments(v, 0, 1))
                mma_16816(out[n + 1], pf, *fragments(v, 2, 3))
        for lane in range(32):
            for h in range(2):
                for n in range(8):
                    col = warp * 64 + 8 * n + 2 * (lane % 4)
                    o[lane // 4 + 8 * h, col:col + 2] = out[n][lane][2 * h:2 * h + 2]
    s_err = np.abs(s - q @ keys.T).max()
    o_err = np.abs(o - p @ keys[:, :RANK]).max()
    print(f"S max |error| {s_err:.2e}, P V max |error| {o_err:.2e}")
    assert s_err < 1e-3 and o_err < 1e-3, "the fragment addressing does not reproduce the products"


if __name__ == "__main__":
    main()
