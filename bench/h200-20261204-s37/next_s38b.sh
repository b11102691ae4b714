#!/usr/bin/env bash
# Prepared in session 37: the six GPU test binaries with both of next_s38a.sh's switches on and k
# split in every model (FLASHLANE_MATMUL_SPLIT_K=1: the test models are too small to split by
# default), so that the next commit can make the switches that won the default.
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz}.
set -u
SETTINGS="split:FLASHLANE_MATMUL_SPLIT32=1,FLASHLANE_MATMUL_SPLIT_K_PROMPTS=1,FLASHLANE_MATMUL_SPLIT_K=1" \
  timeout 560 bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
echo "tests rc=$?"; cat /tmp/tests/summary.txt | tee $OUT/tests_summary.txt
grep -h -B 2 -A 20 "panicked\|FAILED" /tmp/tests/*/*.log | head -60 > $OUT/failures.txt
