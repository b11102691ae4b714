#!/usr/bin/env bash
# Prepared in session 53 (not run). The swapped chain's weights through shared memory, tested
# then measured against the register kernels at one and two streams: `matmul_bf16_swap_ring*`
# (FLASHLANE_MATMUL_SWAP_RING=1) runs every swapped bf16 matmul (one and two tiles, the norm twins,
# the SwiGLU gate/up) with FLASHLANE_MATMUL_SWAP_RING_STAGES (4; here also 2 and 8) chunks a warp
# in flight through shared memory, the first before the wait for the kernel ahead. At 8 slots a
# one-tile matmul of k up to 4,096 has all its weights on their way before that wait. Targets:
# Qwen3-4B's one-row gate/up with its norm (43 us a layer, 2.3 TB/s: 1,557 of a token's 4,000 us;
# 4B at one stream ~64 % of HBM, 80 % asked), Qwen3-0.6B's one-stream attention output and MLP
# down (64 blocks, 7.0 us each: 392 of 1,276 us) and the A3B slice's 4,096-deep outputs (128
# blocks, 145 of 1,410 us; 0.6B and the slice at one stream ~1.4x llama.cpp, 1.5x asked).
# The ring keeps the bits: first the swapped-chain kernel test, which runs it against the 16-row
# kernels (the split layouts' test is next_s54b.sh's).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz} (rebuilt at the commit that prepared this,
# bench/pack_gpu_tests.sh --flashlane) and tiny_model.xz, the default model moved out of the
# tree. ~450 s on an H100 (a fresh machine compiles the kernels once for the tests).
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s54a 150 swapped ring
SWAP="base:FLASHLANE_AB=1 ring:FLASHLANE_MATMUL_SWAP_RING=1 ring2:FLASHLANE_MATMUL_SWAP_RING=1,FLASHLANE_MATMUL_SWAP_RING_STAGES=2 ring8:FLASHLANE_MATMUL_SWAP_RING=1,FLASHLANE_MATMUL_SWAP_RING_STAGES=8"
ab q06_swap qwen3-0.6b 1,2 "$SWAP" $FL
ab a3b_swap qwen3-next-a3b-slice 1,2 "$SWAP" $FL
ab q4b_swap qwen3-4b 1,2 "$SWAP" $FL
