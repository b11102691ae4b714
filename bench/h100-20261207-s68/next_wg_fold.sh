#!/usr/bin/env bash
# Prepared in session 68 (not run): the first run of FLASHLANE_MATMUL_WG_FOLD=1, the 64-row
# blocks' cluster-folded bf16 split on the warpgroup MMA (`matmul_bf16_wg_split_fold*`). Packs of
# the commit to run (`bash bench/pack_gpu_tests.sh --flashlane`; carry gpu-tests.tar.xz,
# tiny_model.xz and flashlane.xz with the default model moved out; limit 600).
# 1. The three kernel tests that hold it beside the tiles' bits (the matmul at every kernel,
#    gathered and accumulated; the gate/up with its SwiGLU in the fold; the input norm in the
#    split, `split_rows_norm_wg`).
# 2. Only if all three pass: decode at 48 and 64 streams, the default against it, Qwen3-4B and
#    -8B (two interleaved rounds); Qwen3-4B's 64-row kernel timeline under it (against
#    bench/h100-20261207-s68/call1/timeline_4b.txt: the tiles' split 2,655 + 2,218 µs a round).
# 3. gpu_dense with every split on it (the warpgroup module compiled for the fixtures, every
#    round of 48–64 rows split and folded): alone = batched, bit for bit, whole models.
# 4. cuBLAS's kernels for Qwen3-4B's projections at 1 and 64 rows (`cublas_matmuls.py --kernels`).
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
room 250 wg_fold_tests && TEST_THREADS=1 kernel_tests wg_fold 240 \
  wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits
if grep -q "test result: ok. 3 passed" $OUT/tests_wg_fold.txt; then
  S="default:FLASHLANE_AB=1 wgfold:FLASHLANE_MATMUL_WG_FOLD=1"
  room 100 ab_4b && ab wgfold_4b qwen3-4b 48,64 "$S" $FL
  room 110 ab_8b && ab wgfold_8b qwen3-8b 48,64 "$S" $FL
  room 60 timeline && timeline wgfold qwen3-4b 64 "wgfold:FLASHLANE_MATMUL_WG_FOLD=1,FLASHLANE_TIMELINE=1" $FL
  if room 130 dense; then
    FLASHLANE_MATMUL_WG_FOLD=1 FLASHLANE_MATMUL_WGMMA=1 FLASHLANE_MATMUL_SPLIT_K=1 FLASHLANE_MATMUL_CLUSTER_FOLD=1 \
      PARALLEL=1 TESTS="gpu_dense" TEST_TIMEOUT=120 bench/gpu_tests.sh /tmp/tests_wf > /dev/null 2>&1
    el "gpu_dense under the warpgroup fold rc=$?"; tee $OUT/tests_dense_wg_fold.txt < /tmp/tests_wf/summary.txt
  fi
else
  el "the warpgroup fold's kernel tests did not all pass: no A/B"
fi
# 4. What cuBLAS launches for Qwen3-4B's projections at 1 and 64 rows (its tiles and split).
if room 40 cublas_kernels; then
  timeout 40 python3 bench/cublas_matmuls.py bench/shapes/qwen3-4b --rows 1,64 --kernels \
    > $OUT/cublas_kernels.md 2>&1
  el "cublas kernels rc=$?"; cat $OUT/cublas_kernels.md
fi
exit 0
