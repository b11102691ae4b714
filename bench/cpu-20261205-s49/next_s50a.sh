#!/usr/bin/env bash
# Prepared in session 49 (no device lent), for the next session's first call: every GPU test
# binary at the stop's defaults. Since the last full pass (09f2d25, session 47) the default
# kernels' PTX is unchanged but the host changed how it launches them: the two-block DeltaNet
# recurrence (7d2bb6a; four binaries passed at it in session 48), the split rows' arguments built
# by one function (ff1cbe8), and a layer's input norms placed through Kernels::normed_matmul /
# gate_up_swiglu_normed (e3ea569: the same launches by default). Then the FP8 widen tests of
# next_s49a.sh if time is left.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default model moved out of
# the tree for the call); ~400 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
TEST_TIMEOUT=200 bench/gpu_tests.sh $OUT/tests_base > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests_base/gpu.txt $OUT/tests_base/summary.txt
tar -C $OUT -cJf $OUT/tests.tar.xz tests_base && rm -rf $OUT/tests_base
