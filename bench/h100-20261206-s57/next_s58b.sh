#!/usr/bin/env bash
# Prepared in session 57 (not run). 1. The test comparing every attention kernel at every
# ATT_KV_AHEAD, the staged kernels and the prep inside the staged one
# (`prep_in_attention_gives_the_bits_of_prep_then_attention`; cut by the calls' limits in
# sessions 56 and 57 behind the other attention tests, it now compiles 9 modules, not 15),
# first: the staged attention becomes the default only after it passes. 2. The swapped chain's
# test with the half tiles (`swapped_chain_gives_the_bits_of_the_16_row_kernels`:
# `matmul_bf16_swap_h` and its norm twin beside every plan). 3. Their A/B
# (FLASHLANE_MATMUL_SWAP_BALANCE=1: Qwen3-4B's o and down on 320 blocks of 8 outputs instead of
# 160 of 16, its q/k/v on one tile a block; Qwen3-0.6B's o and down on 128 blocks instead of 64;
# Qwen3-8B unchanged but for q/k/v) at 1 and 2 streams. ~560 s. Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the model moved out; limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s58b_bits 300 prep_in_attention
kernel_tests s58b_swap 100 swapped_chain
BAL="default:FLASHLANE_AB=1 balance:FLASHLANE_MATMUL_SWAP_BALANCE=1"
room 60 balance_4b && ab balance_4b qwen3-4b 1,2 "$BAL" $FL
room 50 balance_06b && ab balance_06b qwen3-0.6b 1,2 "$BAL" $FL
room 70 balance_8b && ab balance_8b qwen3-8b 1 "$BAL" $FL
