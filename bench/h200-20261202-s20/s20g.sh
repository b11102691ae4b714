#!/usr/bin/env bash
# Session 20, call 4 (what device time was left): flashlane vs llama.cpp on the same weights, the
# Qwen3-0.6B shape, one round (llama.cpp built in the call), then flashlane sampled (Qwen3's
# T 0.6 / top-k 20 / top-p 0.95, and temperature 1) on the same checkpoint.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
FL=/tmp/fl_new; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
FLASHLANE_COMMIT=b5ebadf bench/gpu_vs_llamacpp.sh $OUT/vs --shapes qwen3-0.6b --rounds 1 --keep-models \
  --deadline 430 --run-timeout 60 --flashlane $FL 2>&1 | tail -12
for s in "--temperature 0.6 --top-k 20 --top-p 0.95" "--temperature 1"; do
  [ $(el) -gt 500 ] && break
  echo "== qwen3-0.6b $s" >> $OUT/sampled.txt
  timeout $(( 540 - $(el) )) $FL bench --device cuda --model /tmp/flashlane-gpu-bench/qwen3-0.6b \
    --streams 1,8,32,64 --prompt-tokens 128 --new-tokens 128 $s 2>&1 | tail -5 >> $OUT/sampled.txt
done
cat $OUT/sampled.txt
echo "total $(el) s"
