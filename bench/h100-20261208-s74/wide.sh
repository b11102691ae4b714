#!/usr/bin/env bash
# Session 74: the wide walk in k groups (`FLASHLANE_MATMUL_WALK=wide`: q/k/v, o and down at
# 49–64 rows in blocks of 2 or 3 consumer warpgroups shared out over clusters of 4 or 8 blocks
# along k). Its kernel test first (every form forced, against the other kernels' bits); if it
# passes, A/B at 64 streams on Qwen3-4B against the default (2 rounds), the wide walk's 64-row
# timeline on Qwen3-4B (which forms ran, their blocks), then the A/B on Qwen3-8B.
# Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz}; LIMIT as the budget allows.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
room 110 "matmul kernel test" && TEST_THREADS=1 kernel_tests wide 100 wgmma_matmul_gives_the_other_kernels_bits
if ! grep -q "test result: ok" $OUT/tests_wide.txt 2>/dev/null; then
  el "the matmul kernel test did not pass: no A/B"; exit 0
fi
room 140 "A/B 4B" && ab w4b qwen3-4b 64 "default:FLASHLANE_AB=1 wide:FLASHLANE_MATMUL_WALK=wide" $FL
room 50 timeline && timeline w4b qwen3-4b 64 "wide:FLASHLANE_MATMUL_WALK=wide" $FL
room 150 "A/B 8B" && ab w8b qwen3-8b 64 "default:FLASHLANE_AB=1 wide:FLASHLANE_MATMUL_WALK=wide" $FL
exit 0
