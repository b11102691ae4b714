#!/usr/bin/env bash
# Session 69's last ask, with ~350 device-seconds left after failed starts (calls.md): the three
# kernel tests of FLASHLANE_MATMUL_WG_FOLD=1 side by side (TEST_THREADS=3), then, only if they
# pass, one interleaved round of Qwen3-4B at 64 streams, the default against the warpgroup fold.
# Carry gpu-tests.tar.xz, tiny_model.xz, flashlane.xz; LIMIT ~220.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
TEST_THREADS=3 kernel_tests wg_fold 120 \
  wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits
if grep -q "test result: ok. 3 passed" $OUT/tests_wg_fold.txt; then
  if room 60 ab_4b; then
    SETTINGS="default:FLASHLANE_AB=1 wgfold:FLASHLANE_MATMUL_WG_FOLD=1" STREAMS=64 NEW_TOKENS=64 ROUNDS=1 \
      RUN_TIMEOUT=45 bench/gpu_ab.sh /tmp/ab_4b qwen3-4b $FL > /dev/null 2>&1
    el "A/B rc=$?"; cat /tmp/ab_4b/ab.txt | tee $OUT/ab.txt
  fi
else
  el "the warpgroup fold's kernel tests did not all pass: no A/B"
fi
exit 0
