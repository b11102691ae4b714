#!/usr/bin/env bash
# Prepared in session 44 for the next device session's first call: the six GPU test binaries at
# this session's last defaults (the swapped warpgroup split for FP8 rounds of 17-64 rows and
# bf16 rounds of 17-24 in dense models from Qwen3-4B up; the dense models' early weight loads),
# then with every split of up to 64 rows forced onto the swapped warpgroup MMA in every model
# (FLASHLANE_MATMUL_SPLIT_K=1: the test models are too small to split k by default, so only then
# do these binaries reach the split kernels; FLASHLANE_MATMUL_WGMMA=1 compiles the warpgroup
# module in them). Session 44's call 3 passed the first setting at d8689ed's defaults and was cut
# in the second. ~350 s on an H200.
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz} (the default model moved out).
set -u
S="base:FLASHLANE_AB=1 wg:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_WGMMA=1,FLASHLANE_MATMUL_WG_SPLIT=1,FLASHLANE_MATMUL_EARLY_WEIGHTS=1"
SETTINGS="$S" timeout 580 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
echo "tests rc=$?"; cat $OUT/tests/*/summary.txt
grep -h -B 2 -A 20 "panicked\|FAILED" $OUT/tests/*/*.log | head -60 > $OUT/failures.txt
