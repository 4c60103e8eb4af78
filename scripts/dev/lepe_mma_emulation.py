#!/usr/bin/env python3
# A design aid for LePE on the tensor cores in the one-pass forward (attention/cuda/onepass_kernels.cuh:
# LepeMma, lepe_mma_stage_window, lepe_mma_out; the table of attention/cuda/nala_lepe_mma_table.cu and its
# layout in attention/cuda/nala_params.h): emulates their index math on the CPU, byte address by byte
# address and lane by lane: the table's entries, the window's swizzled cp.async slots, the transposing
# ldmatrix.trans and its stores, the zero slots, the A fragments' ldmatrix rows, the B fragments' table
# entries, mma.m16n8k16 / m16n8k8 on those fragments (PTX ISA fragment layouts) and the epilogue's
# positions; then compares every kept output with torch's conv2d in float64 with the taps as the table
# holds them (hi + lo: exact), within 1e-12; a read of a byte of shared memory never written fails (KeyError).
# Run it after changing that code:
#   .venv/bin/python scripts/dev/lepe_mma_emulation.py
# (the kernel itself is tested on the GPU: GatedTailKernels.LepeOnTheTensorCores).
import torch

torch.manual_seed(0)
W, WROWS, TILE = 16, 8, 64


def bf16_bits(x):  # float32 tensor → its bf16 bits (round to nearest even), as int
    return torch.tensor(x, dtype=torch.float32).to(torch.bfloat16).view(torch.int16).item() & 0xFFFF


def bits_value(b):  # bf16 bits → float
    return torch.tensor([b if b < 0x8000 else b - 0x10000], dtype=torch.int16).view(torch.bfloat16).float().item()


def k16_bytes(d, ks):  # nala_params.h lepe_mma_k16_bytes
    return ((ks // 2) * 8 + 2) * (d + 1) * 16


def table_of(taps, H, d, ks, h):  # nala_lepe_mma_table.cu, one head: {byte offset: bf16 bits}
    mem = {}
    def w(c, dy, dx):
        return taps[(dy * ks + dx), h * d + c].item() if c < d and dx < ks and 0 <= dy < ks else 0.0
    def put(at, c, j, dx, lo):  # the pair (w[j − 1], w[j]) of hi, or of lo, the lower row in the low half
        for half, dy in ((0, j - 1), (1, j)):
            x = w(c, dy, dx)
            hi = bf16_bits(x)
            mem[at + 2 * half] = bf16_bits(x - bits_value(hi)) if lo else hi
    GK = ks // 2
    for row in range(GK * 8 + 2):  # {hi(2g), hi(2g + 1), lo(2g), lo(2g + 1)}
        for c in range(d + 1):
            g, j = row // 8, row % 8 - 2
            for part in range(4):
                put((row * (d + 1) + c) * 16 + 4 * part, c, j, 2 * g + part % 2 if g < GK else ks, part >= 2)
    if ks % 2:
        for row in range(10):  # the last tap column {hi, lo}
            for c in range(d + 1):
                for part in range(2):
                    put(k16_bytes(d, ks) + (row * (d + 1) + c) * 8 + 4 * part, c, row - 2, ks - 1, part == 1)
    return mem


def check(B, H, d, gh, ks):
    R, N, CH = ks // 2, gh * W, d // 8
    CH_BYTES, SLOT = (W + 1) * 16, 16
    GROUPS = (ks + 1) // 2
    v = torch.randn(B, H, N, d).to(torch.bfloat16).float()   # (B, H, N, d) bf16 values
    taps = 0.2 * torch.randn(ks * ks, H * d)                 # (ks², H·d)
    worst, tiles = 0.0, 0
    for h in range(H):
        table = table_of(taps, H, d, ks, h)
        # the taps as the table holds them, hi + lo, exactly in float64
        weff = torch.zeros(d, 1, ks, ks, dtype=torch.float64)
        for dy in range(ks):
            for dx in range(ks):
                for c in range(d):
                    wv = taps[dy * ks + dx, h * d + c].item()
                    hi = bits_value(bf16_bits(wv))
                    weff[c, 0, dy, dx] = hi + bits_value(bf16_bits(wv - hi))
        for b in range(B):
            img = v[b, h].reshape(gh, W, d).permute(2, 0, 1).double()[None]  # (1, d, gh, W)
            ref = torch.nn.functional.conv2d(img, weff, None, 1, R, 1, d)[0].permute(1, 2, 0).reshape(N, d)  # (N, d)
            for t0 in range(0, N, TILE):
                rows = min(TILE, N - t0)
                RT = rows // W
                tiles += 1
                # lepe_mma_stage_window: chunk k of position (y', x) at slot k ^ y'; win[byte] = bf16 bits
                win = {}
                y_first, y_rows = t0 // W - R, RT + ks - 1
                for pos in range(WROWS * W):
                    yw, x = pos // W, pos % W
                    Y = y_first + yw
                    valid = yw < y_rows and 0 <= Y < gh
                    for k in range(CH):
                        for e in range(8):
                            val = v[b, h, Y * W + x, 8 * k + e].item() if valid else 0.0
                            win[(pos * d + 8 * (k ^ yw) + e) * 2] = bf16_bits(val)
                # 1. the transpose: 8 warps, PER_WARP matrices each, x4 at a time
                wt = {}
                MATRICES = W * CH
                PER_WARP = MATRICES // 8
                for warp in range(8):
                    for i in range(PER_WARP // 4):
                        addr = {}  # matrix q, row r → its byte address (from lane 8q + r)
                        for lane in range(32):
                            mine = warp * PER_WARP + 4 * i + lane // 8
                            x, k, r = mine // CH, mine % CH, lane % 8
                            addr[(lane // 8, r)] = ((W * r + x) * d + 8 * (k ^ r)) * 2
                        for lane in range(32):
                            g, t = lane // 4, lane % 4
                            for q in range(4):
                                # .trans: this lane gets rows 2t, 2t + 1 of column g of matrix q
                                lo_v = win[addr[(q, 2 * t)] + 2 * g]
                                hi_v = win[addr[(q, 2 * t + 1)] + 2 * g]
                                mq = warp * PER_WARP + 4 * i + q
                                xq, kq = mq // CH, mq % CH
                                at = (8 * kq + g) * CH_BYTES + xq * SLOT + 4 * t
                                assert at not in wt, "a transposed slot written twice"
                                wt[at], wt[at + 2] = lo_v, hi_v
                for c in range(d):  # the zero slots
                    for e in range(8):
                        wt[c * CH_BYTES + W * SLOT + 2 * e] = 0
                assert max(wt) + 2 <= 64 * 136 * 2, "the transposed window past the φ tile"
                # 2. the products, warp by warp, channel pair by pair
                for warp in range(8):
                    for pr in range(d // 16):
                        c0 = 8 * warp + 2 * pr
                        for ch in range(2):
                            c = c0 + ch
                            acc = [[0.0] * 4 for _ in range(32)]
                            for grp in range(GROUPS):
                                dx = 2 * grp
                                k16 = dx + 1 < ks
                                # A by ldmatrix: lane l gives row l % 8 of matrix l // 8
                                rowaddr = {}
                                for lane in range(32 if k16 else 16):
                                    q = lane // 8
                                    X = 8 * (q & 1) + lane % 8 + 2 * grp + (q >> 1) - R
                                    rowaddr[(q, lane % 8)] = c * CH_BYTES + (X if 0 <= X < W else W) * SLOT
                                def afrag(lane, q):  # non-transposed: row g, columns 2t, 2t + 1
                                    g, t = lane // 4, lane % 4
                                    a = rowaddr[(q, g)] + 4 * t
                                    return bits_value(wt[a]), bits_value(wt[a + 2])
                                # the product from all lanes' fragments: rebuild A (16 × K) and B (K × 8)
                                K = 16 if k16 else 8
                                A = [[0.0] * K for _ in range(16)]
                                Bm = {0: [[0.0] * 8 for _ in range(K)], 1: [[0.0] * 8 for _ in range(K)]}
                                for lane in range(32):
                                    g, t = lane // 4, lane % 4
                                    regs = [afrag(lane, 0), afrag(lane, 1)] + ([afrag(lane, 2), afrag(lane, 3)] if k16 else [])
                                    A[g][2 * t], A[g][2 * t + 1] = regs[0]
                                    A[g + 8][2 * t], A[g + 8][2 * t + 1] = regs[1]
                                    if k16:
                                        A[g][2 * t + 8], A[g][2 * t + 9] = regs[2]
                                        A[g + 8][2 * t + 8], A[g + 8][2 * t + 9] = regs[3]
                                    jrow = (2 * t - g + 1 if g < 4 else 0) + 2
                                    def word(at):
                                        return bits_value(table[at]), bits_value(table[at + 2])
                                    for part in (0, 1):  # hi, lo
                                        if k16:
                                            at = ((grp * 8 + jrow) * (d + 1) + c) * 16 + 8 * part
                                            Bm[part][2 * t][g], Bm[part][2 * t + 1][g] = word(at)
                                            Bm[part][2 * t + 8][g], Bm[part][2 * t + 9][g] = word(at + 4)
                                        else:
                                            at = k16_bytes(d, ks) + (jrow * (d + 1) + c) * 8 + 4 * part
                                            Bm[part][2 * t][g], Bm[part][2 * t + 1][g] = word(at)
                                for part in (0, 1):
                                    for lane in range(32):
                                        g, t = lane // 4, lane % 4
                                        for e in range(4):
                                            m, n = g + 8 * (e >> 1), 2 * t + (e & 1)
                                            acc[lane][e] += sum(A[m][kk] * Bm[part][kk][n] for kk in range(K))
                            # the epilogue: (x, y) of each kept element
                            for lane in range(32):
                                g, t = lane // 4, lane % 4
                                for e in range(4):
                                    x, y = g + 8 * (e >> 1), 2 * t + (e & 1)
                                    if y >= RT:
                                        continue
                                    n = t0 + y * W + x
                                    worst = max(worst, abs(acc[lane][e] - ref[n, c].item()))
    print(f"B {B} H {H} d {d} grid {gh}x{W} ks {ks}: {tiles} tiles, max error {worst:.3e}")
    assert worst < 1e-12, worst


for B, H, gh, ks in ((1, 2, 16, 5), (1, 1, 9, 5), (1, 1, 16, 3), (1, 1, 3, 5), (1, 1, 12, 3)):
    check(B, H, 64, gh, ks)
