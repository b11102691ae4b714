#!/usr/bin/env bash
# Session 19, call 1: GPU tests at the commit built (effe7ff), the probe and depth timings, with
# llama.cpp built and the checkpoints made in the background for the same-run comparison next call.
set -u
T0=$(date +%s)
xz -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL; cp $FL bench/peers/flashlane
mkdir -p /tmp/vs
nohup nice -n 10 python3 bench/gpu_vs_llamacpp.py --out /tmp/vs --flashlane $FL \
  --shapes qwen3-next-a3b-slice,qwen3-4b --q8-peer --prepare-only > /tmp/vs/prep_stdout.txt 2>&1 &
SETTINGS="" TESTS_SECONDS=230 TIMINGS="kernel_define_times matmul_kernel_times" TIMING_SECONDS=190 \
  timeout 560 bench/gpu_session.sh $OUT
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log 2>/dev/null | head -8
tail -5 /tmp/vs/log.txt 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
