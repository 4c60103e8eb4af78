"""The Python package on the GPU (scripts/device_steps/package.sh): correctness (the CUDA op against
the float64 CPU op, torch.library.opcheck on CUDA, torch.compile(fullgraph=True) equal to eager),
then a benchmark table: nala.attention vs NaLa written in eager torch ops (the paper's formulas,
float32 feature maps, as the authors' public code computes them) vs SDPA, forward and
forward+backward, and one DiT block (hidden 384, 6 heads) using each.
Run with the build's operator library: NALA_OPS_LIBRARY=build-device/python/nala/_C.so PYTHONPATH=python."""
import argparse
import math

import torch
import torch.nn.functional as F

import nala
from nala.models import DiTBlock, Attention
from nala.modules import NaLaAttention


def eager_nala(q, k, v, lam=3.0, tau=0.5, alpha=1.0, eps=1e-6):
    dt = q.dtype
    q, k, v = q.float(), k.float(), v.float()

    def phi(x, p):
        xh = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-6)
        a = xh.abs() ** p if torch.is_tensor(p) else x.abs() ** p
        th = math.pi / 4 * torch.tanh(alpha * xh)
        return torch.cat([a * torch.cos(th), a * torch.sin(th)], -1)

    pq = phi(q, lam * (tau + torch.tanh(q.norm(dim=-1, keepdim=True))))
    pk = phi(k, lam)
    S = pk.transpose(-1, -2) @ v / q.shape[2]
    z = pk.mean(2, keepdim=True)
    return ((pq @ S) / ((pq * z).sum(-1, keepdim=True) + eps)).to(dt)


def timed(fn, reps=20, warmup=5):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    ts = []
    for _ in range(reps):
        s.record()
        fn()
        e.record()
        torch.cuda.synchronize()
        ts.append(s.elapsed_time(e))
    return sorted(ts)[len(ts) // 2]


def checks():
    torch.manual_seed(0)
    q, k, v = (torch.randn(2, 3, 300, 64, device="cuda") for _ in range(3))
    o = nala.attention(q, k, v)
    ref = nala.attention(q.double().cpu(), k.double().cpu(), v.double().cpu())
    err = ((o.double().cpu() - ref).norm() / ref.norm()).item()
    print(f"CUDA op vs float64 CPU op: relative error {err:.2e}")
    assert err < 1e-4
    res = torch.library.opcheck(torch.ops.nala.attention_forward.default, (q, k, v, 0, 3.0, 0.5, 1.0, 1e-6, 1e-6, 3.0))
    print("opcheck on CUDA:", res)
    assert all(r == "SUCCESS" for r in res.values())
    block = NaLaAttention(384, 6).cuda()
    x = torch.randn(4, 256, 384, device="cuda", requires_grad=True)
    f = lambda m, x: (m(x) ** 2).mean()
    e = f(block, x)
    ge = torch.autograd.grad(e, [x, *block.parameters()])
    c = torch.compile(f, fullgraph=True)(block, x)
    gc = torch.autograd.grad(c, [x, *block.parameters()])
    worst = max(((a - b).norm() / b.norm()).item() for a, b in zip(gc, ge))
    print(f"compiled (fullgraph) vs eager on CUDA: loss {c.item():.6f} vs {e.item():.6f}, worst gradient rel. error {worst:.2e}")
    assert abs(c.item() - e.item()) <= 1e-4 * abs(e.item()) and worst < 1e-3


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", default="256,1024,4096")
    args = ap.parse_args()
    checks()
    dev, dt = "cuda", torch.bfloat16
    H, d, total = 6, 64, 65536
    print(f"\n# NaLa attention from PyTorch, {torch.cuda.get_device_name()}, bf16, H={H}, d={d}, B*N={total}, median ms")
    print("| N | nala op fwd | eager-torch NaLa fwd | SDPA fwd | nala op fwd+bwd | eager-torch fwd+bwd | SDPA fwd+bwd |")
    print("|---|---|---|---|---|---|---|")
    for N in map(int, args.tokens.split(",")):
        B = total // N
        q, k, v = (torch.randn(B, H, N, d, device=dev, dtype=dt, requires_grad=True) for _ in range(3))
        g = torch.randn(B, H, N, d, device=dev, dtype=dt)
        fns = [nala.attention, eager_nala, F.scaled_dot_product_attention]
        fwd = [timed(lambda f=f: f(q, k, v)) for f in fns]
        both = [timed(lambda f=f: torch.autograd.grad(f(q, k, v), (q, k, v), g)) for f in fns]
        print(f"| {N} | " + " | ".join(f"{t:.3f}" for t in fwd + both) + " |")
    print("\n# one DiT block (hidden 384, 6 heads), batch 256 x 256 tokens, bf16 autocast, forward+backward, median ms")
    print("| attention | ms |")
    print("|---|---|")

    class EagerNaLa(NaLaAttention):
        def forward(self, x, grid_h=None, grid_w=None):
            B, N, D = x.shape
            g = int(math.isqrt(N))
            t = self.qkvg(x).view(B, N, 4, self.heads, D // self.heads)
            q, k, v = (t[:, :, i].transpose(1, 2) for i in range(3))
            o = eager_nala(q, k, v).transpose(1, 2).reshape(B, N, D)
            o = o + self.lepe(t[:, :, 2].reshape(B, g, g, D).permute(0, 3, 1, 2)).flatten(2).transpose(1, 2)
            return self.proj(self.norm(o) * F.silu(t[:, :, 3].reshape(B, N, D)))

    x = torch.randn(256, 256, 384, device=dev, requires_grad=True)
    c = torch.randn(256, 384, device=dev)
    for name, attn in [("nala op (NaLaAttention)", NaLaAttention(384, 6)), ("eager-torch NaLa", EagerNaLa(384, 6)), ("softmax (SDPA)", Attention(384, 6))]:
        blk = DiTBlock(384, 6, 4.0, attn).to(dev)

        def step():
            with torch.autocast("cuda", dtype=torch.bfloat16):
                y = blk(x, c, 16)
            y.float().mean().backward()

        print(f"| {name} | {timed(step, reps=10):.2f} |")


if __name__ == "__main__":
    main()
