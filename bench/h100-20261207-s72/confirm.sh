#!/usr/bin/env bash
# Session 72's check of the new default (the walk where its blocks hold 3 warpgroups: Qwen3-4B's
# gate/up at 49–64 rows): Qwen3-4B at 64 streams, the default against the tiles
# (FLASHLANE_MATMUL_WALK=0) and session 72's A/B setting (=tma, 3 warpgroups, narrow on the
# tiles), one round; the matmul kernel test (the default walk's case with it); then the default's
# and the tiles' kernel timelines where room is left.
# Carry gpu-tests.tar.xz, tiny_model.xz, flashlane.xz; LIMIT as the budget allows.
set -u
T0=$(date +%s)
. bench/device_ab.sh
S="default:FLASHLANE_AB=1 tiles:FLASHLANE_MATMUL_WALK=0 wide:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_OUTS=192,FLASHLANE_MATMUL_WALK_NARROW=tiles"
room 70 "A/B 4B" && ROUNDS=1 ab c4b qwen3-4b 64 "$S" $FL
room 110 "matmul kernel test" && kernel_tests matmul $(( LIMIT - $(date +%s) + T0 - 5 )) \
  wgmma_matmul_gives_the_other_kernels_bits the_default_walk_takes
room 45 timeline && timeline c4b qwen3-4b 64 "default:FLASHLANE_AB=1 tiles:FLASHLANE_MATMUL_WALK=0" $FL
exit 0
