#!/usr/bin/env bash
# Prepared in session 66 (not run): `--attention-kernel by-context` (each row's attention by its
# position: the tensor cores from 1,024 on, the simt kernels before), written after this
# session's calls measured the tensor-core attention winning from ~1,024 keys on (Qwen3-4B) and
# losing below. First its tests: the attention kernel tests (each kernel leaves the rows at
# position −1; a call split in two gives each row its kind's bits) and gpu_target (a stream the
# same alone, batched, moved and drafted across the switch; simt's bits before it). Then the
# A/B on Qwen3-4B: after 128-token prompts by-context must equal simt (every row simt: the
# early return of the rows left is the only change to the default kernels); after 4,096 it must
# equal tensor-cores decoding, and its prefill (chunks straddling 1,024 launch both kinds)
# shows what a round of both costs. Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz,flashlane.xz}
# (packs of the commit with by-context; the default model moved out); limit 600.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
# SKIP_TESTS=1: the A/Bs only (a second call, the tests having run in the first).
[ -z "${SKIP_TESTS:-}" ] && TEST_THREADS=4 kernel_tests attention 220 attention_of_ by_context_rows \
  the_tensor_core_attention prep_in_attention
if [ -z "${SKIP_TESTS:-}" ] && room 150 gpu_target; then
  PARALLEL=1 TESTS="gpu_target" TEST_TIMEOUT=140 bench/gpu_tests.sh /tmp/tests_bc > /dev/null 2>&1
  el "gpu_target rc=$?"; tee $OUT/tests_summary_bc.txt < /tmp/tests_bc/summary.txt
  grep -h "by_context\|panicked" /tmp/tests_bc/*.log | head -5
fi
S="simt:FLASHLANE_AB=1 bc:FLASHLANE_ATTENTION_KERNEL=by-context"
room 70 bc_128 && ab bc_128 qwen3-4b 1,8,64 "$S" $FL
S3="simt:FLASHLANE_AB=1 tc:FLASHLANE_ATTENTION_KERNEL=tensor-cores bc:FLASHLANE_ATTENTION_KERNEL=by-context"
if room 120 bc_4096; then
  SETTINGS="$S3" PROMPT_TOKENS=4096 NEW_TOKENS=64 STREAMS=1,8 ROUNDS=2 RUN_TIMEOUT=60 \
    bench/gpu_ab.sh /tmp/ab_bc4096 qwen3-4b $FL > /dev/null 2>&1
  el "bc_4096 rc=$?"; cat /tmp/ab_bc4096/ab.txt /tmp/ab_bc4096/ab_means.txt | tee -a $OUT/ab.txt
  grep -ho '"attention_kernel":"[a-z-]*","attention_tensor_cores_from":[0-9a-z]*' /tmp/ab_bc4096/*.json | sort | uniq -c
fi
# Prompts of 128 to 4,096 tokens side by side (`--prompt-tokens-min`): by-context's rounds of
# both kinds (two launches a layer) against all-simt and all-tensor-cores.
if room 150 bc_mixed; then
  SETTINGS="$S3" PROMPT_TOKENS=4096 BENCH_ARGS="--prompt-tokens-min 128" NEW_TOKENS=64 STREAMS=8,64 \
    ROUNDS=2 RUN_TIMEOUT=70 bench/gpu_ab.sh /tmp/ab_bcmix qwen3-4b $FL > /dev/null 2>&1
  el "bc_mixed rc=$?"; cat /tmp/ab_bcmix/ab.txt /tmp/ab_bcmix/ab_means.txt | tee -a $OUT/ab.txt
fi
# The tensor-core attention's one-row calls on `attention_mma` (a block of 4 warps, no cluster)
# instead of its cluster twin: ncu (session 66) has the cluster kernel's warps 8-10 % active.
NC="mma:FLASHLANE_ATTENTION_MMA=1 nocluster:FLASHLANE_ATTENTION_MMA=1,FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=1"
room 60 mma_nocluster && ab mma_nocluster qwen3-4b 1,8 "$NC" $FL
exit 0
