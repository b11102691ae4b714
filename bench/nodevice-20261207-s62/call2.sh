#!/usr/bin/env bash
# Session 62, call 2 (after call 1):
# 1. The five whole-model GPU test binaries at this commit's defaults (issue 12 asks them on the
#    H200; they last passed at f15c976), beside them with the swapped chain's L2 prefetch on
#    (FLASHLANE_MATMUL_SWAP_PREFETCH=$PF) where the default model's test binaries take it.
# 2. The prefetch at $PF batches (the distance call 1 found best on Qwen3-4B) against the default
#    at one and two streams on Qwen3-0.6B, -8B and the A3B slice: a default only if none loses.
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz,flashlane.xz}, the default model moved out of
# the tree (tiny_model.xz brings it back); limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
PF=${PF:-2}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
PARALLEL=1 TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults" TEST_TIMEOUT=200 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
room 150 pf_tests && {
  SETTINGS="pf:FLASHLANE_MATMUL_SWAP_PREFETCH=$PF" PARALLEL=1 TESTS="gpu_conformance gpu_dense gpu_target" \
    TEST_TIMEOUT=120 bench/gpu_tests.sh /tmp/tp > /dev/null 2>&1
  el "prefetch tests rc=$?"; tee $OUT/tests_summary_pf.txt < /tmp/tp/summary.txt
}
S="default:FLASHLANE_AB=1 pf$PF:FLASHLANE_MATMUL_SWAP_PREFETCH=$PF"
room 90 ab_06 && ab ab_06 qwen3-0.6b 1,2 "$S" $FL
room 90 ab_8b && ab ab_8b qwen3-8b 1,2 "$S" $FL
room 90 ab_a3b && ab ab_a3b qwen3-next-a3b-slice 1,2 "$S" $FL
exit 0
