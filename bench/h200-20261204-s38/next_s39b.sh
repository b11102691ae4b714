#!/usr/bin/env bash
# Prepared in session 38: session 37's next_s38b.sh at the defaults of c4d3c88 (the split of
# 17-32-row rounds and of a prompt's few tiles now on): the six GPU test binaries with k split in
# every model (FLASHLANE_MATMUL_SPLIT_K=1: the test models are too small to split by default, so
# only then do these binaries reach those kernels). WG=1 in the environment adds the warpgroup
# MMA (FLASHLANE_MATMUL_WGMMA=1, from 128 rows in any model) and the swapped kernels
# (FLASHLANE_MATMUL_WG_SPLIT=1, FLASHLANE_MATMUL_WG_SWAP=1) as a second run, for when next_s39a.sh found it faster (two runs
# take ~560 s: TESTS= can name fewer binaries).
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz}.
set -u
S="split:FLASHLANE_MATMUL_SPLIT_K=1"
# BASE=1 (session 41): the defaults first, so one call is also the plain pass at the packs' commit.
[ "${BASE:-0}" = 1 ] && S="base:FLASHLANE_AB=1 $S"
[ "${WG:-0}" = 1 ] && S="$S wg:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_WGMMA=1,FLASHLANE_MATMUL_WG_SPLIT=1,FLASHLANE_MATMUL_WG_SWAP=1"
SETTINGS="$S" timeout 580 bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
echo "tests rc=$?"; cat /tmp/tests/summary.txt | tee $OUT/tests_summary.txt
grep -h -B 2 -A 20 "panicked\|FAILED" /tmp/tests/*/*.log | head -60 > $OUT/failures.txt
