#!/usr/bin/env bash
# Session 71's first call on an H100 (on an H200, `first.sh` runs session 70's tests.sh first):
# the walk's kernel tests at 4 chunks a step and in k groups (FLASHLANE_MATMUL_WALK_K_GROUPS,
# new), then Qwen3-4B at 64 streams, one interleaved round: the default against the TMA walk at
# depths 4 and 8, in k groups by the rule (o and down: 40 tiles × 3 groups), with rings of 4
# stages at 2 chunks a step (two blocks a multiprocessor) and in clusters of 2; the k groups'
# kernel timeline; then Qwen3-8B at 64 streams: default, TMA walk, TMA walk in k groups.
# Carry gpu-tests.tar.xz, tiny_model.xz, flashlane.xz; LIMIT as the budget allows.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
if [ "${KERNEL_TESTS:-1}" = 1 ] && room 200 "walk kernel tests"; then
  TEST_THREADS=3 kernel_tests walk 190 \
    wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits
  grep -q "test result: ok. 3 passed" $OUT/tests_walk.txt 2>/dev/null || el "the walk's kernel tests did not all pass"
fi
if room 100 "A/B 4B"; then
  SETTINGS="default:FLASHLANE_AB=1 tma:FLASHLANE_MATMUL_WALK=tma tmak:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_K_GROUPS=auto tma8:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_DEPTH=8 tma4st:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_STAGES=4,FLASHLANE_MATMUL_WALK_DEPTH=2 tma2:FLASHLANE_MATMUL_WALK=tma2" \
    STREAMS=64 NEW_TOKENS=64 ROUNDS=1 RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_4b qwen3-4b $FL > /dev/null 2>&1
  el "A/B 4B rc=$?"; cat /tmp/ab_4b/ab.txt | tee -a $OUT/ab.txt
fi
room 40 timeline && timeline tmak qwen3-4b 64 "tmak:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_K_GROUPS=auto" $FL
if room 90 "A/B 8B"; then
  SETTINGS="default:FLASHLANE_AB=1 tma:FLASHLANE_MATMUL_WALK=tma tmak:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_K_GROUPS=auto" \
    STREAMS=64 NEW_TOKENS=64 ROUNDS=1 RUN_TIMEOUT=70 bench/gpu_ab.sh /tmp/ab_8b qwen3-8b $FL > /dev/null 2>&1
  el "A/B 8B rc=$?"; cat /tmp/ab_8b/ab.txt | tee -a $OUT/ab.txt
fi
exit 0
