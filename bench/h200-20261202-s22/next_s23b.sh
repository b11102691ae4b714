#!/usr/bin/env bash
# For the next device session (written in session 22): the machine warm from next_s23a.sh,
# llama.cpp built and the four checkpoints made there. flashlane against llama.cpp on the same
# weights, every shape of issue 12, one round; COMMIT=<the binary's commit>.
set -u
T0=$(date +%s)
FL=/tmp/fl; [ -x $FL ] || { xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL; }
FLASHLANE_COMMIT=${COMMIT:-?} bench/gpu_vs_llamacpp.sh $OUT/vs \
  --shapes qwen3-0.6b,qwen3-4b,qwen3-8b,qwen3-next-a3b-slice --rounds 1 --keep-models --deadline 520 \
  --run-timeout 90 --flashlane $FL 2>&1 | tail -50
echo "total $(( $(date +%s) - T0 )) s"
