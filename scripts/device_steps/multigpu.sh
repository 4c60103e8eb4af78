#!/usr/bin/env bash
# Data-parallel scaling on NCCL: img/s of DiT-S/2, NaLaDiT-S/2 (256 images per GPU) and DiT-XL/2
# (64 per GPU), Fashion-MNIST 32 px = 256 tokens (the token count of ImageNet 256 latents), on 1 GPU
# and on every GPU of the machine under torchrun, the all-reduce overlapped with the backward and
# (--overlap-grads false) after it. img/s: the mean of the metrics windows after the first.
# Usage (a device_build.sh step): multigpu[:STEPS[:MODEL=PER_GPU,...]]
out=$1
steps=${2:-60}
specs=${3:-DiT-S/2=256,NaLaDiT-S/2=256,DiT-XL/2=64}   # model=images per GPU, comma-separated
n=./build-device/nala
w=build-device/multigpu
ngpu=$(nvidia-smi -L | wc -l)
mkdir -p "$w"
table=$out/multigpu.md
echo "| model | GPUs | all-reduce | global batch | img/s | scaling |" > "$table"
echo "|---|---|---|---|---|---|" >> "$table"
for spec in ${specs//,/ }; do
  model=${spec%%=*}; per_gpu=${spec##*=}
  tag=${model//\//_}
  base=""
  s=$steps; [ "$per_gpu" -lt 256 ] && s=$((steps / 2))
  for run in 1:- "$ngpu":overlapped "$ngpu":after; do
    g=${run%%:*}; mode=${run##*:}
    rd=$w/${tag}_${g}_$mode
    rm -rf "$rd"
    args=(train --preset fashion-mnist-s2 --model "$model" --batch $((per_gpu * g)) --steps "$s" --log-every $((s / 3)) --sample-every 0
          --ckpt-every 100000 --device cuda --out "$rd")
    [ "$mode" = after ] && args+=(--overlap-grads false)
    if [ "$g" = 1 ]; then
      CUDA_VISIBLE_DEVICES=0 $n "${args[@]}" > "$rd.log" 2>&1
    else
      torchrun --no-python --nproc-per-node "$g" --master-port 29755 $n "${args[@]}" > "$rd.log" 2>&1
    fi
    rc=$?
    ips=$(python3 -c "import json,sys; m=[json.loads(l) for l in open('$rd/metrics.jsonl')]; print(f\"{sum(x['img_per_s'] for x in m[1:])/max(1,len(m)-1):.0f}\")" 2>/dev/null || echo "failed rc=$rc")
    [ "$g" = 1 ] && base=$ips
    scale=$(python3 -c "print(f'{float(\"$ips\")/float(\"$base\"):.2f}x')" 2>/dev/null || echo "-")
    echo "| $model | $g | $mode | $((per_gpu * g)) | $ips | $scale |" >> "$table"
    grep -h "^data parallel:" "$rd.log" | head -1 | sed 's/^/    /' >> "$out/multigpu_notes.txt"
    [ "$rc" != 0 ] && tail -5 "$rd.log" >> "$table"
  done
done
cat "$table"
