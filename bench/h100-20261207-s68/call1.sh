#!/usr/bin/env bash
# Session 68, first call (whatever comes): session 67's prepared call (next_s68a.sh) reordered
# for a budget cut by failed starts, with the cuBLAS reference added:
# 1. The five whole-model test binaries at the new default (`--attention-kernel auto`; gpu_fixtures'
#    new tests: each fixture's default attention, and every fixture the tensor cores fit, by
#    context across a switch two steps after its prompt, alone = batched = moved).
# 2. The attention kernel test of many heads, with Qwen3-14B's groups of 5 (40 over 8).
# 3. What the batch invariance costs the matmuls: a decode round's projections under cuBLAS
#    (bench/cublas_matmuls.py, bf16 activations, no invariance) beside flashlane's kernel
#    timeline of the same rounds (Qwen3-4B, 1 and 64 streams).
# 4. The one-row tensor-core calls on `attention_mma` (no cluster) against the cluster kernel.
# 5. Qwen3-14B simt against by-context from 256 (whether groups of 5 join the default).
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz,flashlane.xz}; limit 600.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
room 260 whole_model_tests && whole_model_tests
room 140 many_heads && TEST_THREADS=1 kernel_tests many_heads 130 attention_of_many_heads
if room 60 cublas; then
  timeout 60 python3 bench/cublas_matmuls.py bench/shapes/qwen3-4b bench/shapes/qwen3-8b \
    > $OUT/cublas_matmuls.md 2>&1
  el "cublas rc=$?"; cat $OUT/cublas_matmuls.md
fi
room 60 timeline && timeline 4b qwen3-4b 1,64 "default:FLASHLANE_TIMELINE=1" $FL
NC="tc:FLASHLANE_ATTENTION_KERNEL=tensor-cores nocluster:FLASHLANE_ATTENTION_KERNEL=tensor-cores,FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=1"
room 60 nocluster && ab nocluster qwen3-4b 1,8 "$NC" $FL
BC="FLASHLANE_ATTENTION_KERNEL=by-context,FLASHLANE_ATTENTION_TENSOR_CORES_FROM=256"
for p in 128 2048; do
  if room 70 q14b_$p; then
    SETTINGS="simt:FLASHLANE_ATTENTION_KERNEL=simt bc256:$BC" PROMPT_TOKENS=$p NEW_TOKENS=64 \
      STREAMS=1,8,64 ROUNDS=1 RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_14b_$p qwen3-14b $FL > /dev/null 2>&1
    el "14b $p rc=$?"; cat /tmp/ab_14b_$p/ab.txt /tmp/ab_14b_$p/ab_means.txt | tee -a $OUT/ab.txt
  fi
done
exit 0
