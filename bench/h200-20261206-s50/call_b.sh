#!/usr/bin/env bash
# Session 50, call B: every GPU test binary but backend_cuda (call A runs it) at the defaults,
# then the whole-model tests with the attention's prep inside the attention kernel
# (FLASHLANE_PREP_IN_ATTENTION=1, where it is not the default): a one-row round's rows then take
# the fused kernel and a mixed round's the two launches, so "alone = batched = moved = with drafts"
# compares the two paths. Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the
# default model moved out of the tree for the call).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults" TEST_TIMEOUT=150 \
  bench/gpu_tests.sh $OUT/tests_base > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests_base/gpu.txt $OUT/tests_base/summary.txt; ls ~/.cache/flashlane/kernels | wc -l
if [ $(( $(date +%s) - T0 )) -lt 330 ]; then
  TESTS="gpu_target gpu_dense gpu_conformance" SETTINGS="p1:FLASHLANE_PREP_IN_ATTENTION=1" TEST_TIMEOUT=100 \
    bench/gpu_tests.sh $OUT/tests_p1 > /dev/null 2>&1
  el "tests p1 rc=$?"; cat $OUT/tests_p1/summary.txt
fi
tar -C $OUT -cJf $OUT/tests.tar.xz tests_base $(ls -d $OUT/tests_p1 2>/dev/null | xargs -r -n1 basename) && rm -rf $OUT/tests_base $OUT/tests_p1
