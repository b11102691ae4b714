#!/usr/bin/env bash
# Session 67, call 2: where by-context should switch. Call 1 (same session) had by-context at
# 1,024 equal to simt after 128-token prompts and to tensor-cores after 4,096, but with prompts of
# 128-4,096 tokens side by side tensor-cores beat it (1.48x against 1.37x at 8 streams, 1.63x
# against 1.42x at 64): the rows before 1,024 lose the tensor cores' prefill (1.18x from 512 in
# session 66). Here by-context from 256 and 512 against tensor-cores on those mixed prompts, the
# same after 512-token prompts against simt (where the decode rows all take the tensor cores at
# 256), and Qwen3-0.6B (2 query heads a KV head) after 1,024. Carry flashlane.xz; limit 600.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
BC="FLASHLANE_ATTENTION_KERNEL=by-context,FLASHLANE_ATTENTION_TENSOR_CORES_FROM"
if room 100 mixed; then
  SETTINGS="tc:FLASHLANE_ATTENTION_KERNEL=tensor-cores bc256:$BC=256 bc512:$BC=512" PROMPT_TOKENS=4096 \
    BENCH_ARGS="--prompt-tokens-min 128" NEW_TOKENS=64 STREAMS=8,64 ROUNDS=1 RUN_TIMEOUT=70 \
    bench/gpu_ab.sh /tmp/ab_mix qwen3-4b $FL > /dev/null 2>&1
  el "mixed rc=$?"; cat /tmp/ab_mix/ab.txt /tmp/ab_mix/ab_means.txt | tee -a $OUT/ab.txt
fi
for p in 512 128; do
  if room 70 p$p; then
    SETTINGS="simt:FLASHLANE_AB=1 bc256:$BC=256 bc512:$BC=512 tc:FLASHLANE_ATTENTION_KERNEL=tensor-cores" \
      PROMPT_TOKENS=$p NEW_TOKENS=128 STREAMS=1,8,64 ROUNDS=1 RUN_TIMEOUT=60 \
      bench/gpu_ab.sh /tmp/ab_p$p qwen3-4b $FL > /dev/null 2>&1
    el "p$p rc=$?"; cat /tmp/ab_p$p/ab.txt /tmp/ab_p$p/ab_means.txt | tee -a $OUT/ab.txt
  fi
done
if room 60 small; then
  SETTINGS="simt:FLASHLANE_AB=1 bc512:$BC=512 tc:FLASHLANE_ATTENTION_KERNEL=tensor-cores" \
    PROMPT_TOKENS=1024 NEW_TOKENS=128 STREAMS=1,8,64 ROUNDS=1 RUN_TIMEOUT=50 \
    bench/gpu_ab.sh /tmp/ab_06 qwen3-0.6b $FL > /dev/null 2>&1
  el "0.6b rc=$?"; cat /tmp/ab_06/ab.txt /tmp/ab_06/ab_means.txt | tee -a $OUT/ab.txt
fi
exit 0
