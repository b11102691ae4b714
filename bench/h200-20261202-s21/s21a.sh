#!/usr/bin/env bash
# Session 21, call 1: the GPU tests at the session's first commit; where the tiled matmul stalls
# (ncu sections over its launches in a 4B-shape prompt of 512 tokens); where a 64-stream decode
# round and a 64 x 128 prompt of the 4B shape go, per kernel.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl_new; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
SETTINGS="" TESTS_SECONDS=210 timeout 215 bench/gpu_session.sh $OUT
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
echo "tests done at $(el) s"
W=/tmp/w1; mkdir -p $W
d=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $d/
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
FLASHLANE_CUDA_GRAPHS=0 timeout 90 $ncu --kernel-name regex:'matmul_bf16_tiled' --launch-skip 2 --launch-count 4 \
  --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section MemoryWorkloadAnalysis \
  --section Occupancy --section LaunchStats --section InstructionStats \
  $FL bench --device cuda --model $d --load-format dummy --streams 1 --prompt-tokens 512 --new-tokens 2 > $W/tiled_detail.txt 2>&1
echo "detail rc=$? at $(el) s"
cp $W/tiled_detail.txt $OUT/
NEW_TOKENS=12 RUN_TIMEOUT=100 timeout 110 bench/gpu_profile.sh $W/p qwen3-4b $FL 64 > $OUT/profile_4b_64.txt 2>&1
echo "profile 64 rc=$? at $(el) s"
STEPS=prompt PROMPT_TOKENS=128 NEW_TOKENS=2 RUN_TIMEOUT=100 timeout $(( 580 - $(el) )) bench/gpu_profile.sh $W/q qwen3-4b $FL 64 > $OUT/profile_4b_prompt64x128.txt 2>&1
echo "profile prompt rc=$? at $(el) s"
tar -C $W -cJf $OUT/w.tar.xz . 2>/dev/null
echo "total $(el) s"
