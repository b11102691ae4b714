#!/usr/bin/env bash
# Prepared in session 52 (not run): the narrow kernels' depth on the swapped chain, the one-stream
# question the profiles left (bench/RESULTS.md session 52). At one and two rows the projections
# whose outputs fill half a GPU or less run `matmul_bf16_swap` (one output tile of 16 a block, the
# narrow kernel's depth and launch bounds): Qwen3-0.6B's attention output and MLP down (64 blocks,
# 7.0 µs each in ncu, 392 of a token's 1,276 µs), the A3B slice's DeltaNet/attention outputs (128
# blocks, 12 µs) and its MoE front (73 blocks, 6 µs). Each warp streams 4-8 chunks of 64 k-elements
# two at a time (MMA_NARROW_DEPTH 2); FLASHLANE_MATMUL_NARROW_DEPTH=3 / 4 compiles 3 / 4 at a time
# with one block a multiprocessor (the bits never change). Then the swapped chain's output tiles a
# block forced to one or two (FLASHLANE_MATMUL_SWAP_TILES). Then MTP's speed-up on the GPU with the
# default model of session 51. The whole kernel test binary is next_s53t.sh's (a call of its own).
# Carry bench/peers/{flashlane.xz,tiny_model.xz} (the default model moved out of the tree); ~440 s
# on an H100.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
DEPTHS="d2:FLASHLANE_AB=1 d3:FLASHLANE_MATMUL_NARROW_DEPTH=3 d4:FLASHLANE_MATMUL_NARROW_DEPTH=4"
ab q06_depth qwen3-0.6b 1,2,8 "$DEPTHS" $FL
ab a3b_depth qwen3-next-a3b-slice 1,2,8 "$DEPTHS" $FL
ab q4b_depth qwen3-4b 1,8 "$DEPTHS" $FL
# The swapped chain's output tiles a block forced (FLASHLANE_MATMUL_SWAP_TILES, new in session 52):
# one (twice the blocks of a wide matrix, each at the narrow depth) or two, against the plan's
# (Qwen3-4B's one-row gate/up with its norm runs 608 two-tile blocks, 113 registers a thread: 2.3
# waves of the 264 that fit at once, 2.3 TB/s in ncu; its FP8 twin swaps up to 8 rows).
TILES="auto:FLASHLANE_AB=1 t1:FLASHLANE_MATMUL_SWAP_TILES=1 t2:FLASHLANE_MATMUL_SWAP_TILES=2"
ab q4b_tiles qwen3-4b 1,2 "$TILES" $FL
ab a3b_tiles qwen3-next-a3b-slice 1,2 "$TILES" $FL
ab q4b_fp8_tiles qwen3-4b-fp8 1,8 "$TILES" $FL
# Session 51's two MoE launches each alone in bf16 (measured only together, 0.96× / 0.95× at 1 / 2,
# and the sum alone only in FP8, 0.975×): what decides whether they are removed.
ab a3b_moe_alone qwen3-next-a3b-slice 1,2 "base:FLASHLANE_AB=1 sum:FLASHLANE_MOE_SUM_IN_DOWN=1 route:FLASHLANE_MOE_ROUTE_IN_FRONT=1" $FL
# MTP's speed-up on the GPU with the default model shipped in session 51 (issue 12: ≥ 1.5× at 1
# and 8 streams on counting, kept; last measured on the model before it).
TASKS=counting DRAFTS="none mtp:3" REPS=2 BENCH_ARGS="--device cuda" FLASHLANE=$FL \
  timeout 150 bench/mtp_speedup.sh /tmp/mtp > $OUT/mtp_speedup.txt 2>&1
el "mtp_speedup rc=$?"; tail -8 $OUT/mtp_speedup.txt
