#!/usr/bin/env bash
# Prepared in session 53 (not run): the k split's layouts (next_s54a.sh) on Qwen3-8B at 64
# streams, the other dense shape of issue 12's 64-stream goal. Run it only if next_s54a.sh found
# a layout faster on Qwen3-4B; drop the layouts it found slower. Carry bench/peers/flashlane.xz
# and tiny_model.xz, the default model moved out. ~250 s on an H100 (the 8B dummy weights' making
# included).
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
LAYOUTS=${LAYOUTS:-"base:FLASHLANE_AB=1 first:FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 g2first:FLASHLANE_MATMUL_SPLIT_GROUP=2,FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 g4first:FLASHLANE_MATMUL_SPLIT_GROUP=4,FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1"}
ab q8b_layout qwen3-8b 48,64 "$LAYOUTS" $FL
