#!/usr/bin/env bash
# Numerics of the fused block kernels: 300 bf16 steps of DiT-S/2 on Fashion-MNIST (32 px, batch 256),
# fused and unfused (NALA_FUSED_BLOCKS=0) from the same seed, and fused from another seed (the size
# of ordinary run-to-run differences); loss curves compared by window means.
out=$1
steps=${2:-300}
n=./build-device/nala
w=build-device/numerics
mkdir -p "$w"
for run in unfused:0:0 fused:1:0 fused_seed1:1:1; do
  name=${run%%:*}; rest=${run#*:}; f=${rest%%:*}; seed=${rest##*:}
  rm -rf "$w/$name"
  NALA_FUSED_BLOCKS=$f $n train --preset fashion-mnist-s2 --model DiT-S/2 --steps "$steps" --log-every 10 --sample-every 0 --ckpt-every 100000 \
    --seed "$seed" --device cuda --out "$w/$name" > "$w/$name.log" 2>&1 || { tail -5 "$w/$name.log"; echo "$name FAILED"; }
done
python3 - "$w" "$out/fused_numerics.md" <<'PY'
import json, sys
w, dst = sys.argv[1], sys.argv[2]
m = {k: [json.loads(l) for l in open(f"{w}/{k}/metrics.jsonl")] for k in ("unfused", "fused", "fused_seed1")}
L = {k: [r["loss"] for r in v] for k, v in m.items()}
n = len(L["unfused"])
rows = ["| steps | unfused loss | fused loss | fused, seed 1 | |fused-unfused| | |seed1-seed0| |", "|---|---|---|---|---|---|"]
for a in range(0, n, max(1, n // 6)):
    b = min(n, a + max(1, n // 6))
    mu = {k: sum(v[a:b]) / (b - a) for k, v in L.items()}
    rows.append(f"| {m['unfused'][a]['step']}-{m['unfused'][b-1]['step']} | {mu['unfused']:.4f} | {mu['fused']:.4f} | {mu['fused_seed1']:.4f} | "
                f"{abs(mu['fused']-mu['unfused']):.4f} | {abs(mu['fused_seed1']-mu['fused']):.4f} |")
ips = {k: sum(r["img_per_s"] for r in v[3:]) / max(1, len(v) - 3) for k, v in m.items()}
rows.append("")
rows.append("img/s (windows after the third): " + ", ".join(f"{k} {v:.0f}" for k, v in ips.items()))
open(dst, "w").write("\n".join(rows) + "\n")
print("\n".join(rows))
PY
