#!/usr/bin/env bash
# The quality experiment on a 2-GPU machine: the main four runs on GPU 0 and the ablations on GPU 1
# at the same time (each run uses one GPU, as on the 1-GPU machine).
out=$1
steps=${2:-500}
CUDA_VISIBLE_DEVICES=0 bash scripts/device_steps/experiment.sh "$out" main "$steps" > build-device/logs/experiment_main.log 2>&1 &
CUDA_VISIBLE_DEVICES=1 bash scripts/device_steps/experiment.sh "$out" ablations "$steps" > build-device/logs/experiment_ablations.log 2>&1 &
wait
