#!/usr/bin/env bash
# Session 21, call 4 (the machine warm from call 3, llama.cpp built and the checkpoints made
# there): flashlane against llama.cpp on the same weights, the Qwen3-4B shape and the A3B slice,
# one round each.
set -u
T0=$(date +%s)
NEW=/tmp/fl_new; [ -x $NEW ] || { xz -dc bench/peers/flashlane.xz > $NEW; chmod +x $NEW; }
FLASHLANE_COMMIT=${COMMIT:-?} bench/gpu_vs_llamacpp.sh $OUT/vs --shapes qwen3-4b,qwen3-next-a3b-slice --rounds 1 \
  --keep-models --deadline 500 --run-timeout 90 --flashlane $NEW 2>&1 | tail -30
echo "total $(( $(date +%s) - T0 )) s"
