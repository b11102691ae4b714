#!/usr/bin/env bash
# Session 74, with little device time left: `wide.sh`'s steps speed first — the A/B of
# `FLASHLANE_MATMUL_WALK=wide` against the default at 64 streams on Qwen3-4B (2 rounds), then
# the matmul kernel test (every wide form forced, against the other kernels' bits) with what is
# left, then the wide walk's 64-row timeline.
# Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz}; LIMIT as the budget allows.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-300}
. bench/device_ab.sh
room 130 "A/B 4B" && ab w4b qwen3-4b 64 "default:FLASHLANE_AB=1 wide:FLASHLANE_MATMUL_WALK=wide" $FL
left=$(( LIMIT - $(date +%s) + T0 - 5 ))
[ $left -gt 60 ] && TEST_THREADS=1 kernel_tests wide $left wgmma_matmul_gives_the_other_kernels_bits
room 50 timeline && timeline w4b qwen3-4b 64 "wide:FLASHLANE_MATMUL_WALK=wide" $FL
exit 0
