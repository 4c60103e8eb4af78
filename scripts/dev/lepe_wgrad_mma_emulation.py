#!/usr/bin/env python3
# A design aid for LePE's weight gradient on the tensor cores (attention/cuda/gated_tail_kernels.cu:
# MmaTile, stage_mma_tile, lepe_wgrad_mma): emulates their index math on the CPU, lane by lane and
# position by position: the tiles a block walks, the cp.async slots of du's and v's staged pieces (with
# the zero fill outside the grid and past D), each lane's four du and four v reads a row (its row or
# column clamped to KS − 1 past the taps; B's column-7 lanes reading ones), the fragments the byte
# permutes make (PTX ISA, mma.m16n8k16 bf16: a0 = A(g, 2t..2t+1), a2 = A(g, 2t+8..), b0 = B(2t.., g),
# b1 = B(2t+8.., g); C(g, 2t..2t+1) in c0, c1), the product, and the stores of taps and bias; then
# compares with the direct weight and bias gradients on integer data (exact). A read of a staged
# position never written fails. Run it after changing that code:
#   .venv/bin/python scripts/dev/lepe_wgrad_mma_emulation.py
# (the kernel itself is tested on the GPU: GatedTailKernels.*, with kStageWgradMma).
import sys

import numpy as np

UNWRITTEN = -(10**9)


def direct(du, v, KS):
    B, H, W, D = du.shape
    R = KS // 2
    dw = np.zeros((D, KS, KS), np.int64)
    for i in range(KS):
        for j in range(KS):
            for y in range(H):
                for x in range(W):
                    yy, xx = y + i - R, x + j - R
                    if 0 <= yy < H and 0 <= xx < W:
                        dw[:, i, j] += (du[:, y, x, :] * v[:, yy, xx, :]).sum(axis=0)
    return dw, du.sum(axis=(0, 1, 2))


def emulate(du, v, KS):
    B, H, W, D = du.shape
    R, rows, pitch = KS // 2, 8, 17
    du_rows, v_cols = rows + 2 * R, 16 + 2 * R
    ty, tx = (H + rows - 1) // rows, (W + 15) // 16
    out_w, out_b = np.zeros((D, KS, KS), np.int64), np.zeros(D, np.int64)
    for chunk in range((D + 63) // 64):
        for q in range(8):  # warp q: channels 8q .. 8q + 7 of the chunk (piece q)
            c = chunk * 64 + q * 8
            acc = np.zeros((8, 32, 4), np.int64)  # (channel, lane, c0..c3)
            for ti in range(B * ty * tx):
                b = ti // (tx * ty)
                rem = ti - b * tx * ty
                y0, x0 = (rem // tx) * rows, (rem % tx) * 16
                dus = np.full((du_rows * pitch, 8), UNWRITTEN, np.int64)  # piece q of every staged position
                vs = np.full((rows * v_cols, 8), UNWRITTEN, np.int64)
                for slot in range(32):  # stage_mma_tile's threads of piece q
                    col, r0 = slot % 16, slot // 16
                    for k in range(du_rows // 2):
                        r = r0 + 2 * k
                        yy, xx = y0 - R + r, x0 + col
                        ok = c < D and 0 <= yy < H and xx < W
                        dus[r * pitch + col] = du[b, yy, xx, c:c + 8] if ok else 0
                    if slot < v_cols:
                        for r in range(rows):
                            yy, xx = y0 + r, x0 - R + slot
                            ok = c < D and yy < H and 0 <= xx < W
                            vs[r * v_cols + slot] = v[b, yy, xx, c:c + 8] if ok else 0
                for r in range(min(rows, H - y0)):
                    A = np.zeros((8, 16, 16), np.int64)  # (channel, m, k)
                    Bm = np.zeros((8, 16, 8), np.int64)  # (channel, k, n)
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        gt = min(g, KS - 1)
                        pa = [dus[(2 * R - gt + r) * pitch + 2 * t + col] for col in (0, 1, 8, 9)]
                        pb = [np.ones(8, np.int64)] * 4 if g == 7 else [vs[r * v_cols + 2 * t + gt + col] for col in (0, 1, 8, 9)]
                        for piece in pa + pb:
                            assert (piece != UNWRITTEN).all(), f"lane {lane} row {r} reads a position never staged"
                        for cc in range(8):  # word cc / 2, half cc % 2 of each piece: channel cc
                            A[cc, g, 2 * t], A[cc, g, 2 * t + 1], A[cc, g, 2 * t + 8], A[cc, g, 2 * t + 9] = (p[cc] for p in pa)
                            Bm[cc, 2 * t, g], Bm[cc, 2 * t + 1, g], Bm[cc, 2 * t + 8, g], Bm[cc, 2 * t + 9, g] = (p[cc] for p in pb)
                    A[:, 8:, :] = 0  # a1 = a3 = 0
                    Dm = A @ Bm  # (channel, 16, 8)
                    for lane in range(32):
                        g, t = lane >> 2, lane & 3
                        acc[:, lane] += np.stack([Dm[:, g, 2 * t], Dm[:, g, 2 * t + 1], Dm[:, g + 8, 2 * t], Dm[:, g + 8, 2 * t + 1]], 1)
            for cc in range(8):
                if c + cc >= D:
                    continue
                for lane in range(32):
                    g, t = lane >> 2, lane & 3
                    for e in range(2):
                        if g < KS and 2 * t + e < KS:
                            out_w[c + cc, g, 2 * t + e] += acc[cc, lane, e]
                    if g == R and t == 3:
                        out_b[c + cc] += acc[cc, lane, 1]
    return out_w, out_b


ok = True
rng = np.random.default_rng(0)
# (B, grid_h, grid_w, KS, D): partial row tiles and strips, grids narrower than a strip, one-token grids,
# a chunk past D (72 channels: the second chunk's last 7 pieces inactive)
for B, H, W, KS, D in [(2, 5, 9, 3, 8), (1, 16, 16, 5, 16), (2, 11, 21, 7, 72), (1, 3, 3, 7, 8), (1, 9, 40, 5, 8), (3, 1, 1, 5, 8)]:
    du = rng.integers(-3, 4, size=(B, H, W, D)).astype(np.int64)
    v = rng.integers(-3, 4, size=(B, H, W, D)).astype(np.int64)
    (dw, db), (ew, eb) = direct(du, v, KS), emulate(du, v, KS)
    same = (dw == ew).all() and (db == eb).all()
    ok &= bool(same)
    print(f"B {B}, grid {H}x{W}, LePE {KS}, D {D}: {'equal' if same else 'DIFFERENT'}")
sys.exit(0 if ok else 1)
