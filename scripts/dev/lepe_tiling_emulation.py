#!/usr/bin/env python3
# A design aid for attention/cuda/gated_tail_kernels.cu: emulates the tiled LePE kernels' index
# math (tile_pos, stage_window, for_each_tap, the lepe_conv and lepe_wgrad loops) on the CPU in
# float64 and compares with torch's conv2d and its gradients. Run it after changing the tiling:
#   .venv/bin/python scripts/dev/lepe_tiling_emulation.py
# (the kernels themselves are tested on the GPU by tests/cuda/gated_tail_test.cpp).
import torch, itertools
torch.manual_seed(0)
kStrip = 16
ELEM = 8  # bytes of a lane's channel pair in the window: 4 for bf16, 8 for float (set by the loop below)
def tile_rows(KS):
    cols = kStrip + (KS - 1 if KS > 0 else 0); bpr = cols * 32 * ELEM; halo = KS - 1 if KS > 0 else 0
    return 8 if (8 + halo) * bpr <= 48 * 1024 else 4 if (4 + halo) * bpr <= 48 * 1024 else 2
def tile_pos(t, rows, gh, gw):
    tx = (gw + kStrip - 1) // kStrip; ty = (gh + rows - 1) // rows
    b = t // (tx * ty); rem = t - b * tx * ty
    return b, (rem // tx) * rows, (rem % tx) * kStrip
def window_of(img, b, y0, x0, KS, rows):  # img (B, Hg, Wg, C)
    R = KS // 2; cols = kStrip + KS - 1; wr = rows + KS - 1
    B, gh, gw, C = img.shape
    win = torch.zeros(wr, cols, C, dtype=img.dtype)
    for pos in range(wr * cols):
        r, col = divmod(pos, cols); yy = y0 + r - R; xx = x0 + col - R
        if 0 <= yy < gh and 0 <= xx < gw: win[r, col] = img[b, yy, xx]
    return win
def conv(img, w, KS):  # w (C, KS*KS) tap-major per channel
    B, gh, gw, C = img.shape; rows = tile_rows(KS)
    out = torch.zeros_like(img)
    tiles = B * ((gh + rows - 1) // rows) * ((gw + kStrip - 1) // kStrip)
    for t in range(tiles):
        b, y0, x0 = tile_pos(t, rows, gh, gw); win = window_of(img, b, y0, x0, KS, rows)
        for r in range(rows):
            y = y0 + r
            if y >= gh: continue
            acc = torch.zeros(kStrip, C, dtype=img.dtype)
            for i in range(KS):
                for xi in range(kStrip + KS - 1):
                    for j in range(KS):
                        xo = xi - j
                        if 0 <= xo < kStrip: acc[xo] += w[:, i * KS + j] * win[r + i, xi]
            for xo in range(kStrip):
                if x0 + xo >= gw: break
                out[b, y, x0 + xo] = acc[xo]
    return out
def wgrad(du, v, KS):
    B, gh, gw, C = v.shape; rows = tile_rows(KS); acc = torch.zeros(C, KS * KS + 1, dtype=v.dtype)
    tiles = B * ((gh + rows - 1) // rows) * ((gw + kStrip - 1) // kStrip)
    for t in range(tiles):
        b, y0, x0 = tile_pos(t, rows, gh, gw); win = window_of(v, b, y0, x0, KS, rows)
        for r in range(rows):
            y = y0 + r
            if y >= gh: continue
            g = torch.zeros(kStrip, C, dtype=v.dtype)
            for xo in range(kStrip):
                if x0 + xo < gw: g[xo] = du[b, y, x0 + xo]; acc[:, KS * KS] += g[xo]
            for i in range(KS):
                for xi in range(kStrip + KS - 1):
                    for j in range(KS):
                        xo = xi - j
                        if 0 <= xo < kStrip: acc[:, i * KS + j] += g[xo] * win[r + i, xi]
    return acc
for ELEM, (B, gh, gw, KS) in itertools.product((4, 8), [(2, 5, 7, 5), (1, 3, 33, 5), (1, 9, 20, 3), (1, 4, 17, 7), (2, 16, 16, 5)]):
    C = 3
    v = torch.randn(B, gh, gw, C, dtype=torch.float64, requires_grad=True)
    W = torch.randn(C, 1, KS, KS, dtype=torch.float64, requires_grad=True)
    ref = torch.nn.functional.conv2d(v.permute(0, 3, 1, 2), W, padding=KS // 2, groups=C).permute(0, 2, 3, 1)
    wt = W.detach().reshape(C, KS * KS)
    out = conv(v.detach(), wt, KS)
    du = torch.randn_like(ref)
    ref.backward(du)
    dv = conv(du, wt.flip(1), KS)   # the flipped taps (tap-major table reversed along taps)
    acc = wgrad(du, v.detach(), KS)
    e = [(out - ref.detach()).abs().max().item(), (dv - v.grad).abs().max().item(),
         (acc[:, :KS * KS] - W.grad.reshape(C, -1)).abs().max().item(), (acc[:, KS * KS] - du.sum((0, 1, 2))).abs().max().item()]
    print("window bytes/lane", ELEM, "B gh gw ks", B, gh, gw, KS, ["%.1e" % x for x in e], "rows/tile", tile_rows(KS))
    assert max(e) < 1e-12, e
