#!/usr/bin/env bash
# Session 69's first call, whatever comes (packs of the commit to run: gpu-tests.tar.xz,
# tiny_model.xz, flashlane.xz; limit 600):
# 1. side by side (the machine's 16 cores compile each binary's kernels apart): on an H200 only,
#    the five whole-model GPU test binaries at the defaults (issue 12 asks them there; none since
#    session 60; they passed on an H100 at `623f3ec`), and the three kernel tests that hold FLASHLANE_MATMUL_WG_FOLD=1's split beside
#    the tiles' bits (session 68's `next_wg_fold.sh` step 1);
# 2. only if those three pass: decode at 48 and 64 streams, the default against the warpgroup
#    fold, Qwen3-4B then -8B (two interleaved rounds; AB_STREAMS, 48,64 unless set), and
#    Qwen3-4B's 64-row kernel timeline under it, as time allows.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
( TEST_THREADS=1 kernel_tests wg_fold 240 \
    wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits \
    > /tmp/kernel_tests.log 2>&1 ) &
kpid=$!
if grep -q H200 $OUT/gpu.txt; then whole_model_tests; else el "not an H200: no whole-model tests"; fi
wait $kpid; cat /tmp/kernel_tests.log
if grep -q "test result: ok. 3 passed" $OUT/tests_wg_fold.txt; then
  S="default:FLASHLANE_AB=1 wgfold:FLASHLANE_MATMUL_WG_FOLD=1"
  room 100 ab_4b && ab wgfold_4b qwen3-4b ${AB_STREAMS:-48,64} "$S" $FL
  room 110 ab_8b && ab wgfold_8b qwen3-8b ${AB_STREAMS:-48,64} "$S" $FL
  room 60 timeline && timeline wgfold qwen3-4b 64 "wgfold:FLASHLANE_MATMUL_WG_FOLD=1,FLASHLANE_TIMELINE=1" $FL
else
  el "the warpgroup fold's kernel tests did not all pass: no A/B"
fi
exit 0
