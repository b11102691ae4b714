#!/usr/bin/env bash
# Prepared in session 67 (not run): the first call of the next device session, on whatever
# comes (an H200 is asked for; H100s have come since session 61). Packs of the commit to run
# (`bash bench/pack_gpu_tests.sh --flashlane`; carry gpu-tests.tar.xz, tiny_model.xz and
# flashlane.xz with the default model moved out; limit 600).
# 1. The five whole-model test binaries at the new default (`--attention-kernel auto`, and the
#    library's `LoadOptions::default()` the same): gpu_fixtures' new tests (each fixture's
#    default attention; every fixture the tensor cores fit, by context across a switch two steps
#    after its prompt, the same bits alone, batched and moved).
# 2. The attention kernel test of many heads, now with Qwen3-14B's groups of 5 (40 over 8).
# 3. Qwen3-14B's decode: simt against by-context from 256, after 128- and 2,048-token prompts:
#    if the group of 5 passes 2 and wins here, it joins `TENSOR_CORES_DEFAULT_GROUPS`.
# 4. The one-row tensor-core calls on `attention_mma` (4 warps, no cluster) against the
#    cluster kernel (session 66's ncu: the cluster kernel 8-10 % of its warp slots active):
#    tensor-cores with and without FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=1 on Qwen3-4B.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
room 260 whole_model_tests && whole_model_tests
room 140 many_heads && TEST_THREADS=1 kernel_tests many_heads 130 attention_of_many_heads
BC="FLASHLANE_ATTENTION_KERNEL=by-context,FLASHLANE_ATTENTION_TENSOR_CORES_FROM=256"
for p in 128 2048; do
  if room 70 q14b_$p; then
    SETTINGS="simt:FLASHLANE_ATTENTION_KERNEL=simt bc256:$BC" PROMPT_TOKENS=$p NEW_TOKENS=64 \
      STREAMS=1,8,64 ROUNDS=1 RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_14b_$p qwen3-14b $FL > /dev/null 2>&1
    el "14b $p rc=$?"; cat /tmp/ab_14b_$p/ab.txt /tmp/ab_14b_$p/ab_means.txt | tee -a $OUT/ab.txt
  fi
done
NC="tc:FLASHLANE_ATTENTION_KERNEL=tensor-cores nocluster:FLASHLANE_ATTENTION_KERNEL=tensor-cores,FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=1"
room 60 nocluster && ab nocluster qwen3-4b 1,8 "$NC" $FL
exit 0
