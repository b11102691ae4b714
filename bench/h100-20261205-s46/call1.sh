#!/usr/bin/env bash
# Session 46, call 1: session 45's `next_s45a.sh` part 1 alone (the A/B moved to a later
# call so the tests are not cut by the call's limit): the six GPU test binaries at HEAD's
# defaults (session 44's: the swapped warpgroup split for FP8 rounds of 17-64 rows and bf16
# rounds of 17-24 in dense models from Qwen3-4B up; the dense models' early weight loads), then
# with every split of up to 64 rows forced onto the swapped warpgroup MMA and the early weights
# on in every model. Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
S="base:FLASHLANE_AB=1 wg:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_WGMMA=1,FLASHLANE_MATMUL_WG_SPLIT=1,FLASHLANE_MATMUL_EARLY_WEIGHTS=1"
SETTINGS="$S" timeout 570 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests/summary.txt $OUT/tests/gpu.txt
grep -h -B 2 -A 20 "panicked\|FAILED" $OUT/tests/*/*.log | head -60 > $OUT/failures.txt
tar -C $OUT -cJf $OUT/logs.tar.xz tests && rm -rf $OUT/tests/base $OUT/tests/wg
