#!/usr/bin/env bash
# Session 18, call 2: A/B of the FP8 fit; where FP8 matmuls stall at one stream (ncu sections,
# 4B shape, bf16 and FP8); the 80B-A3B FP8 profile at 1 and 64 streams.
set -u
T0=$(date +%s)
FL=/tmp/fl2; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
W=/tmp/w2; mkdir -p $W
for shape in qwen3-4b qwen3-4b-fp8; do
  d=$(mktemp -d); cp bench/shapes/$shape/config.json $d/
  ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
  FLASHLANE_CUDA_GRAPHS=0 timeout 80 $ncu --kernel-name regex:'^matmul' --launch-skip 300 --launch-count 8 \
    --section SpeedOfLight --section WarpStateStats --section MemoryWorkloadAnalysis --section LaunchStats \
    --section Occupancy $FL bench --device cuda --model $d --load-format dummy --streams 1 --prompt-tokens 16 \
    --new-tokens 8 > $W/detail_$shape.txt 2>&1
  echo "detail $shape rc=$? at $(( $(date +%s) - T0 )) s"
done
tar -C $W -cJf $OUT/detail.tar.xz .
AB="base:FLASHLANE_AB=1 fp8fit:FLASHLANE_FP8_FIT=1" AB_SHAPES="qwen3-next-a3b-slice-fp8 qwen3-4b-fp8" \
AB_STREAMS=1,8,64 AB_SECONDS=110 FLASHLANE_BIN=$FL \
PROFILE_SHAPES="qwen3-next-80b-a3b-fp8" PROFILE_STREAMS=1,64 PROFILE_SHAPE_SECONDS=$(( 560 - ($(date +%s) - T0) - 230 )) \
  timeout $(( 570 - ($(date +%s) - T0) )) bench/gpu_session.sh $OUT
echo "total $(( $(date +%s) - T0 )) s"
