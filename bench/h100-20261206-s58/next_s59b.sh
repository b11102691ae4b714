#!/usr/bin/env bash
# Prepared in session 58 (not run). 1. The test comparing every attention kernel at every
# ATT_KV_AHEAD, the staged kernels and the prep inside the 16-warp staged one
# (`prep_in_attention_gives_the_bits_of_prep_then_attention`, 9 modules compiled; cut by the
# calls' limits in sessions 56 and 57, not run in 58). 2. The 8-warp staged attention on the A3B
# slice (its blocks hold 2 query heads of 256 dims, so the default leaves it the grouped
# kernel) and the 16-warp one with the prep inside on Qwen3-0.6B (1.027× at 32 streams in
# session 58, 1.002× at 64), each against the default, 2 rounds. ~480 s. Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the default model moved out of the
# tree; limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-560}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s59b_bits 300 prep_in_attention
room 120 staged_a3b && ab staged_a3b qwen3-next-a3b-slice 32,64 "default:FLASHLANE_AB=1 staged8:FLASHLANE_ATTENTION_STAGED=8" $FL
room 70 staged_06b && ab staged_06b qwen3-0.6b 32,64 "default:FLASHLANE_AB=1 staged:FLASHLANE_ATTENTION_STAGED=1" $FL
