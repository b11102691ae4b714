#!/usr/bin/env bash
# For the next device session (written in session 25, not yet run). Carry
# bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz} (bench/pack_gpu_tests.sh --flashlane)
# with the default model moved out of the tree. What the warpgroup redesign needs first: every
# matmul kernel's time on random operands (`matmul_kernel_times`, which times the first wgmma
# version at 64-8,192 rows, never timed on random operands), where a Qwen3-8B 64-stream round goes
# at this commit (ncu, graphs off; it ran past 100 s in session 25: 200 s here), and the GPU tests.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
timeout 150 $B/backend_cuda --ignored matmul_kernel_times --nocapture --test-threads 1 > $OUT/matmul_times.txt 2>&1
echo "times rc=$? at $(el) s"; grep -E "(4B|8B) gate_up rows +(64|2048|8192):" $OUT/matmul_times.txt | sed -E 's/ +/ /g'
NEW_TOKENS=12 RUN_TIMEOUT=200 timeout 230 bench/gpu_profile.sh /tmp/prof qwen3-8b $FL 64 > /dev/null 2>&1
echo "profile rc=$? at $(el) s"; cp /tmp/prof/*.txt $OUT/ 2>/dev/null; head -20 $OUT/qwen3-8b.built.s64.txt
SETTINGS="" TESTS_SECONDS=200 timeout 205 bench/gpu_session.sh $OUT/session
echo "total $(el) s"
