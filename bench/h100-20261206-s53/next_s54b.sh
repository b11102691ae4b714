#!/usr/bin/env bash
# Prepared in session 53 (not run): the tiles' k split laid out otherwise (`SplitLayout`,
# kernels/mod.rs). Qwen3-4B's 64-stream round ran its split matmuls at 1.2-1.5 TB/s in session
# 52's profile (gate/up 65 us a layer: 1,216 blocks of five chunks each; o/down 160 blocks), 5.4
# of the round's 8.6 ms; 4B and 8B at 64 streams are 0.91x llama.cpp (1.5x asked).
# FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 puts a tile's residue blocks next to each other in the
# grid; FLASHLANE_MATMUL_SPLIT_GROUP=N has a block walk N residues (each partial written apart).
# The partials and the fold are the same, so are the bits: first the kernel test that says so on
# the GPU (every layout compiled by override), then the A/B at 32 (the 32-row split) and 64
# streams (the 64-row split) on Qwen3-4B; prefill (a 128-token prompt's split o/down/qkv) is in
# the same rows. Qwen3-8B at 48 and 64 only where Q8B=1 (its dummy weights take a while to make:
# run it when a layout won on 4B, with LAYOUTS= the base and the winners).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz} and tiny_model.xz, the default model moved
# out. ~300 s on an H100 (~500 s with Q8B=1).
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s54b 150 every_split_layout matmul_matches
LAYOUTS=${LAYOUTS:-"base:FLASHLANE_AB=1 first:FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 g2first:FLASHLANE_MATMUL_SPLIT_GROUP=2,FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 g4first:FLASHLANE_MATMUL_SPLIT_GROUP=4,FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 g8:FLASHLANE_MATMUL_SPLIT_GROUP=8"}
ab q4b_layout qwen3-4b 32,64 "$LAYOUTS" $FL
[ "${Q8B:-0}" = 1 ] && ab q8b_layout qwen3-8b 48,64 "$LAYOUTS" $FL
