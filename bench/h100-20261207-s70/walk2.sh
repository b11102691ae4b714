#!/usr/bin/env bash
# Session 70's second call: the walk's consumers now multiply MWK_DEPTH (4) chunks of a residue a
# step (call 1's one chunk a step left the TMA walk at 0.94× the default on Qwen3-4B at 64 streams,
# its 32-row o and down at twice cuBLAS's time). The three kernel tests again (every form of the
# walk beside the tiles), then Qwen3-4B at 64 streams, one interleaved round: the default, the
# TMA walk at depths 4 and 8, with blocks of 64 rows for o and down too, in clusters of 2, and
# with rings of 4 stages at 2 chunks a step (two blocks a multiprocessor);
# the TMA walk's kernel timeline; then Qwen3-8B at 64 streams, the default against the TMA walk.
# Carry gpu-tests.tar.xz, tiny_model.xz, flashlane.xz; LIMIT as the budget allows.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
# KERNEL_TESTS=0 leaves them out (on an H200, `tests.sh` on the same warm machine ran them).
if [ "${KERNEL_TESTS:-1}" = 1 ] && room 160 "walk kernel tests"; then
  TEST_THREADS=3 kernel_tests walk 150 \
    wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits
  grep -q "test result: ok. 3 passed" $OUT/tests_walk.txt 2>/dev/null || el "the walk's kernel tests did not all pass"
fi
if room 90 "A/B 4B"; then
  SETTINGS="default:FLASHLANE_AB=1 tma:FLASHLANE_MATMUL_WALK=tma tma8:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_DEPTH=8 tma64:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_ROWS=64 tma2:FLASHLANE_MATMUL_WALK=tma2 tma4st:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_STAGES=4,FLASHLANE_MATMUL_WALK_DEPTH=2" \
    STREAMS=64 NEW_TOKENS=64 ROUNDS=1 RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_4b qwen3-4b $FL > /dev/null 2>&1
  el "A/B 4B rc=$?"; cat /tmp/ab_4b/ab.txt | tee -a $OUT/ab.txt
fi
room 40 timeline && timeline tma qwen3-4b 64 "tma:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_TIMELINE=1" $FL
if room 80 "A/B 8B"; then
  SETTINGS="default:FLASHLANE_AB=1 tma:FLASHLANE_MATMUL_WALK=tma" \
    STREAMS=64 NEW_TOKENS=64 ROUNDS=1 RUN_TIMEOUT=70 bench/gpu_ab.sh /tmp/ab_8b qwen3-8b $FL > /dev/null 2>&1
  el "A/B 8B rc=$?"; cat /tmp/ab_8b/ab.txt | tee -a $OUT/ab.txt
fi
exit 0
