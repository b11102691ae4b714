#!/usr/bin/env bash
# Session 67, call 4: by-context from 256 on two more shapes with 4+ query heads a KV head:
# Qwen3-8B after 128-token prompts (against simt) and the A3B slice with prompts of 128-4,096
# tokens side by side (against simt and tensor-cores). Carry flashlane.xz; limit 300.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
BC="FLASHLANE_ATTENTION_KERNEL=by-context,FLASHLANE_ATTENTION_TENSOR_CORES_FROM"
if room 80 p128_8b; then
  SETTINGS="simt:FLASHLANE_AB=1 bc256:$BC=256" PROMPT_TOKENS=128 NEW_TOKENS=128 STREAMS=1,8,64 \
    ROUNDS=1 RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_8b qwen3-8b $FL > /dev/null 2>&1
  el "8b rc=$?"; cat /tmp/ab_8b/ab.txt /tmp/ab_8b/ab_means.txt | tee -a $OUT/ab.txt
fi
if room 90 mixed_a3b; then
  SETTINGS="simt:FLASHLANE_AB=1 tc:FLASHLANE_ATTENTION_KERNEL=tensor-cores bc256:$BC=256" PROMPT_TOKENS=4096 \
    BENCH_ARGS="--prompt-tokens-min 128" NEW_TOKENS=64 STREAMS=8,64 ROUNDS=1 RUN_TIMEOUT=70 \
    bench/gpu_ab.sh /tmp/ab_a3b qwen3-next-a3b-slice $FL > /dev/null 2>&1
  el "a3b rc=$?"; cat /tmp/ab_a3b/ab.txt /tmp/ab_a3b/ab_means.txt | tee -a $OUT/ab.txt
fi
exit 0
