#!/usr/bin/env python3
# A design aid for the one-pass kernels with LePE (attention/cuda/onepass_kernels.cuh: lepe_rows,
# lepe_stage_window, lepe_rows_out, as the forward and the backward (onepass_backward.cuh) use them; the
# host's rank split, lepe_window_bytes and reversed taps in attention/cuda/nala_cuda.cpp): emulates
# their index math on the CPU in float64, tile by tile and thread item by thread item (lepe_blocks_out's
# blocks of 2 × 4 or 1 × 8 tokens × 2 channels where a tile is whole grid rows; else a run of
# LEPE_RUN tokens × 4 channels: the one-row path and the per-token path), and compares
# u = o + LePE(v) + b with torch's conv2d, and dv + LePE's dv with conv2d's input gradient. It also checks
# that every window read falls inside the rows a tile staged and that the host's window size covers
# every tile. Run it after changing that code:
#   .venv/bin/python scripts/dev/lepe_in_attention_emulation.py
# (the kernel itself is tested on the GPU: GatedTailKernels.LepeInAttentionEqualsTheTwoOperations).
import torch
torch.manual_seed(0)
TILE = 64
RUN = 4  # onepass_kernels.cuh LEPE_RUN

def rank_split(N, BH, sms=132):  # nala_cuda.cpp onepass_split
    tiles = (N + TILE - 1) // TILE
    ranks = 1
    while ranks < 8 and ranks < tiles and BH * ranks < 4 * sms:
        ranks *= 2
    per = ((N + ranks - 1) // ranks + TILE - 1) // TILE * TILE
    return (N + per - 1) // per, per

def lepe_rows(t0, t_end, gh, gw, R):  # onepass_kernels.cuh lepe_rows
    return max(0, t0 // gw - R), min(gh - 1, (t_end - 1) // gw + R)

def window_bytes(N, ranks, per, gh, gw, ks, d):  # nala_cuda.cpp lepe_window_bytes
    R, rows = ks // 2, 0
    for r in range(ranks):
        begin, end = r * per, min(N, (r + 1) * per)
        for t0 in range(begin, end, TILE):
            last = min(end, t0 + TILE) - 1
            rows = max(rows, min(gh - 1, last // gw + R) - max(0, t0 // gw - R) + 1)
    return rows * gw * d * 2

def check(B, H, d, gh, gw, ks, backward=False):
    # backward: the one-pass backward's use (onepass_backward.cuh): the window of ∂L/∂u (here `v`), the
    # taps reversed, no bias; the attention's dv (here `o`) added; against conv2d's input gradient
    N, D, R, C4 = gh * gw, H * d, ks // 2, d // 4
    stats = {(2, 4): 0, (1, 8): 0, True: 0, False: 0}  # items by path: 2 × 4 and 1 × 8 token blocks, one grid row, per token
    v = torch.randn(B, H, N, d, dtype=torch.float64)
    o = torch.randn(B, H, N, d, dtype=torch.float64)
    w = torch.randn(D, 1, ks, ks, dtype=torch.float64)
    bias = torch.zeros(D, dtype=torch.float64) if backward else torch.randn(D, dtype=torch.float64)
    wt = w.reshape(D, ks * ks).t().contiguous()  # (ks², D) tap-major
    if backward:
        wt = wt.flip(0).contiguous()  # the taps reversed (nala_cuda.cpp nala_backward_cuda)
    ranks, per = rank_split(N, B * H)
    limit = window_bytes(N, ranks, per, gh, gw, ks, d)
    u = torch.full((B, N, D), float('nan'), dtype=torch.float64)
    for b in range(B):
        for h in range(H):
            for r in range(ranks):
                begin, end = r * per, min(N, (r + 1) * per)
                for t0 in range(begin, end, TILE):
                    y0, y1 = lepe_rows(t0, min(end, t0 + TILE), gh, gw, R)
                    wcount = (y1 - y0 + 1) * gw
                    assert wcount * d * 2 <= limit, (B, H, d, gh, gw, ks, t0)
                    win = v[b, h, y0 * gw:y0 * gw + wcount]  # (positions, d): lepe_stage_window's copy
                    rows = min(TILE, end - t0)
                    block = None  # lepe_rows_out's choice: token blocks (BR, BC) where the tile is whole grid rows
                    if t0 % gw == 0:
                        if gw % 4 == 0 and rows % (2 * gw) == 0:
                            block = (2, 4)
                        elif not backward and gw % 8 == 0 and rows % gw == 0:
                            block = (1, 8)
                    if block:  # lepe_blocks_out's items: a block of BR × BC tokens × 2 channels
                        BR, BC = block
                        C2, bw = d // 2, gw // BC
                        inv_bw = torch.tensor(1.0 / bw, dtype=torch.float32)  # the kernel's float reciprocal
                        for i in range(rows // gw // BR * bw * C2):
                            blk, cp = divmod(i, C2)
                            by = int((torch.tensor(float(blk), dtype=torch.float32) + 0.5) * inv_bw)
                            assert by == blk // bw, (blk, bw, by)
                            y, x = t0 // gw + by * BR, (blk - by * bw) * BC
                            stats[block] += 1
                            ch = h * d + 2 * cp
                            acc = [[bias[ch:ch + 2].clone() for _ in range(BC)] for _ in range(BR)]
                            for wr in range(BR + ks - 1):  # window rows, each read once for the block
                                yy = y - R + wr
                                span = []
                                for q in range(BC + ks - 1):
                                    xx = x - R + q
                                    col_in = R <= q < R + BC or 0 <= xx < gw
                                    assert (R <= q < R + BC) <= (0 <= xx < gw)  # the block's own columns lie in the grid
                                    if 0 <= yy < gh and col_in:
                                        pos = (yy - y0) * gw + xx
                                        assert 0 <= pos < wcount, (t0, yy, xx)
                                        span.append(win[pos, 2 * cp:2 * cp + 2])
                                    else:
                                        span.append(torch.zeros(2, dtype=torch.float64))
                                for rr in range(BR):
                                    ti = wr - rr
                                    if 0 <= ti < ks:
                                        for tj in range(ks):
                                            wv = wt[ti * ks + tj, ch:ch + 2]
                                            for p in range(BC):
                                                acc[rr][p] = acc[rr][p] + wv * span[p + tj]
                            for rr in range(BR):
                                for p in range(BC):
                                    n = (y + rr) * gw + x + p
                                    assert t0 <= n < t0 + rows
                                    u[b, n, ch:ch + 2] = acc[rr][p] + o[b, h, n, 2 * cp:2 * cp + 2]
                        continue
                    runs = (rows + RUN - 1) // RUN
                    for i in range(runs * C4):  # lepe_rows_out's items: a run of RUN tokens × 4 channels
                        s, c = divmod(i, C4)
                        t = s * RUN
                        n = t0 + t
                        count = min(RUN, rows - t)
                        y, x = divmod(n, gw)
                        one_row = count == RUN and x + RUN <= gw
                        stats[one_row] += 1
                        ch = h * d + 4 * c
                        acc = [bias[ch:ch + 4].clone() for _ in range(RUN)]

                        def at(yy, xx):  # the window's 4 channels at (yy, xx), zeros outside the grid
                            if 0 <= yy < gh and 0 <= xx < gw:
                                pos = (yy - y0) * gw + xx
                                assert 0 <= pos < wcount, (t0, n, yy, xx)
                                return win[pos, 4 * c:4 * c + 4]
                            return torch.zeros(4, dtype=torch.float64)
                        for ti in range(ks):
                            span = [at(y + ti - R, x - R + q) for q in range(RUN + ks - 1)] if one_row else None
                            for tj in range(ks):
                                wv = wt[ti * ks + tj, ch:ch + 4]
                                for p in range(RUN):
                                    if one_row:
                                        e = span[p + tj]
                                    else:
                                        yp, xp = divmod(n + min(p, count - 1), gw)
                                        e = at(yp + ti - R, xp + tj - R)
                                    acc[p] = acc[p] + wv * e
                        for p in range(count):
                            u[b, n + p, ch:ch + 4] = acc[p] + o[b, h, n + p, 4 * c:4 * c + 4]
    img = v.permute(0, 1, 3, 2).reshape(B, D, gh, gw)  # (B, D, Hg, Wg): channel h·d + e
    if backward:  # ∂/∂x of Σ conv2d(x, w) ⊙ du at du = img: the transposed convolution
        x = torch.zeros(B, D, gh, gw, dtype=torch.float64, requires_grad=True)
        torch.nn.functional.conv2d(x, w, None, padding=R, groups=D).backward(img)
        ref = x.grad.flatten(2).transpose(1, 2)  # (B, N, D)
    else:
        ref = torch.nn.functional.conv2d(img, w, bias, padding=R, groups=D).flatten(2).transpose(1, 2)  # (B, N, D)
    ref = ref + o.permute(0, 2, 1, 3).reshape(B, N, D)
    err = (u - ref).abs().max().item()
    assert err < 1e-12, (B, H, d, gh, gw, ks, backward, err)
    what = "backward (dv)" if backward else "forward (u)"
    print(f"{what:13} B {B} H {H} d {d} grid {gh}x{gw} ks {ks}: {ranks} rank(s) of {per} tokens, window ≤ {limit} bytes, items 2x4/1x8/one-row/per-token {stats[(2, 4)]}/{stats[(1, 8)]}/{stats[True]}/{stats[False]}, max error {err:.1e}")

# DiT-S/2's grid; a cluster of 8 ranks; tiles ending mid-row; d 72; a grid narrower than R; one row;
# one-row tiles (the forward's 1 × 8 blocks); an 8-wide grid (2 × 4 blocks, 4 block rows a tile)
for case in [(2, 1, 64, 16, 16, 5), (1, 1, 64, 32, 32, 5), (2, 1, 64, 12, 24, 3), (1, 2, 72, 16, 16, 5), (1, 1, 8, 40, 3, 5),
             (1, 1, 8, 1, 70, 3), (1, 1, 8, 9, 7, 5), (1, 1, 8, 5, 13, 3), (1, 1, 8, 2, 64, 5), (1, 1, 8, 16, 8, 3)]:
    for backward in (False, True):
        check(*case, backward=backward)
