#!/usr/bin/env bash
# Prepared in session 48 (its device time spent), for the next session's first call: the FP8
# tiles' e4m3 widened by bit operations (FLASHLANE_FP8_WIDEN=1: one bf16-pair product a pair;
# =2: f32 products and one conversion a pair), never run on a GPU. Its kernel test (bits against
# the conversions, every code, the 16-row, warpgroup and MoE FP8 kernels), then the whole-model
# tests with =1 and the kernel timings of both (with the never-run probes MMA_X_PRESPLIT and
# MMA_FP8_F16: what splitting x once and f16 FP8 tiles would save); also the two test binaries
# session 48's call 5 did not reach at 7d2bb6a's defaults (gpu_fixtures, gpu_faults). The A/B
# runs are next_s49b.sh's (the next call).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default model moved out of
# the tree for the call); ~450 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 120 $b/backend_cuda fp8_widen --test-threads 1 > $OUT/tests_kernels.txt 2>&1
rc=$?; el "backend_cuda fp8_widen rc=$rc"; grep -E "^test |test result|panicked" $OUT/tests_kernels.txt
if [ $rc = 0 ]; then
  TESTS="gpu_conformance gpu_dense gpu_fixtures" SETTINGS="w1:FLASHLANE_FP8_WIDEN=1" \
    TEST_TIMEOUT=100 bench/gpu_tests.sh $OUT/tests_w1 > /dev/null 2>&1
  el "tests w1 rc=$?"; cat $OUT/tests_w1/summary.txt
  FLASHLANE_REQUIRE_GPU=1 timeout 200 $b/backend_cuda --ignored kernel_define_times --nocapture --test-threads 1 \
    > $OUT/define_times.txt 2>&1
  el "define times rc=$?"; grep -E ": MoE" $OUT/define_times.txt | cut -c1-300
fi
TESTS="gpu_fixtures gpu_faults" TEST_TIMEOUT=100 bench/gpu_tests.sh $OUT/tests_rest > /dev/null 2>&1
el "rest rc=$?"; cat $OUT/tests_rest/summary.txt
tar -C $OUT -cJf $OUT/tests.tar.xz $(cd $OUT && ls -d tests_*/) && rm -rf $OUT/tests_w1 $OUT/tests_rest
