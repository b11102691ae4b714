#!/usr/bin/env bash
# Session 71's last call: the walk with 3 consumer warpgroups a block (FLASHLANE_MATMUL_WALK_OUTS=192:
# Qwen3-4B's gate/up in 102 blocks of 192 outputs sharing one stage of x) and the walk's 32-row
# matrices left to the tiles (FLASHLANE_MATMUL_WALK_NARROW=tiles), Qwen3-4B at 64 streams, one
# interleaved round; then, where room is left, the three kernel tests that run them.
# Carry gpu-tests.tar.xz, tiny_model.xz, flashlane.xz; LIMIT as the budget allows.
set -u
T0=$(date +%s)
. bench/device_ab.sh
if room 80 "A/B 4B"; then
  SETTINGS="default:FLASHLANE_AB=1 wide:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_OUTS=192,FLASHLANE_MATMUL_WALK_NARROW=tiles narrow:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_NARROW=tiles wide128:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_OUTS=128,FLASHLANE_MATMUL_WALK_NARROW=tiles" \
    STREAMS=64 NEW_TOKENS=64 ROUNDS=1 RUN_TIMEOUT=50 bench/gpu_ab.sh /tmp/ab_4b qwen3-4b $FL > /dev/null 2>&1
  el "A/B 4B rc=$?"; cat /tmp/ab_4b/ab.txt | tee -a $OUT/ab.txt
fi
if room 110 "walk kernel tests"; then
  TEST_THREADS=3 kernel_tests wide $(( LIMIT - $(date +%s) + T0 - 5 )) \
    wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits
fi
exit 0
