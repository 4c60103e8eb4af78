#!/usr/bin/env bash
# Data-parallel scaling on NCCL: img/s of DiT-S/2 and NaLaDiT-S/2 (Fashion-MNIST, 256 tokens) with
# 256 images per GPU on 1 GPU and on every GPU of the machine under torchrun.
out=$1
steps=${2:-60}
n=./build-device/nala
w=build-device/multigpu
ngpu=$(nvidia-smi -L | wc -l)
mkdir -p "$w"
table=$out/multigpu.md
echo "| model | GPUs | global batch | img/s | scaling |" > "$table"
echo "|---|---|---|---|---|" >> "$table"
for model in DiT-S/2 NaLaDiT-S/2; do
  tag=${model//\//_}
  base=""
  for g in 1 "$ngpu"; do
    [ "$g" = 1 ] && [ -n "$base" ] && continue
    rd=$w/${tag}_$g
    rm -rf "$rd"
    args=(train --preset fashion-mnist-s2 --model "$model" --batch $((256 * g)) --steps "$steps" --log-every 20 --sample-every 0
          --ckpt-every 100000 --device cuda --out "$rd")
    if [ "$g" = 1 ]; then
      CUDA_VISIBLE_DEVICES=0 $n "${args[@]}" > "$rd.log" 2>&1
    else
      torchrun --no-python --nproc-per-node "$g" --master-port 29755 $n "${args[@]}" > "$rd.log" 2>&1
    fi
    rc=$?
    ips=$(python3 -c "import json,sys; m=[json.loads(l) for l in open('$rd/metrics.jsonl')]; print(f\"{sum(x['img_per_s'] for x in m[1:])/max(1,len(m)-1):.0f}\")" 2>/dev/null || echo "failed rc=$rc")
    [ "$g" = 1 ] && base=$ips
    scale=$(python3 -c "print(f'{float(\"$ips\")/float(\"$base\"):.2f}x')" 2>/dev/null || echo "-")
    echo "| $model | $g | $((256 * g)) | $ips | $scale |" >> "$table"
    [ "$rc" != 0 ] && tail -5 "$rd.log" >> "$table"
  done
done
