#!/usr/bin/env bash
# Session 22, call 2 (the machine warm from call 1, llama.cpp built and the 0.6B / 8B checkpoints
# made there): A/Bs of the two prepared switches on the Qwen3-4B shape and of the one-head
# attention order on the A3B slice (bench/peers/flashlane_base.xz: this commit without it), then
# flashlane against llama.cpp on Qwen3-0.6B and Qwen3-8B, then the matmul kernel times with the
# k split.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
[ -f models/flashlane-tiny/model.safetensors ] || xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; [ -x $FL ] || { xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL; }
BASE=/tmp/fl_base; xz -dc bench/peers/flashlane_base.xz > $BASE; chmod +x $BASE
SETTINGS="base:FLASHLANE_AB=1 splitk:FLASHLANE_MATMUL_SPLIT_K=1 few:FLASHLANE_ATTENTION_FEW_WARPS=1" \
  ROUNDS=1 STREAMS=1,32,64 timeout 150 bench/gpu_ab.sh /tmp/ab-4b qwen3-4b $FL > /dev/null 2>&1
echo "A/B 4B rc=$? at $(el) s"; cat /tmp/ab-4b/ab.txt | tee -a $OUT/ab.txt
SETTINGS="base:FLASHLANE_AB=1 few:FLASHLANE_ATTENTION_FEW_WARPS=1" \
  ROUNDS=2 STREAMS=1,64 timeout 150 bench/gpu_ab.sh /tmp/ab-a3b qwen3-next-a3b-slice $BASE $FL > /dev/null 2>&1
echo "A/B A3B rc=$? at $(el) s"; cat /tmp/ab-a3b/ab.txt | tee -a $OUT/ab.txt
FLASHLANE_COMMIT=${COMMIT:-?} timeout 250 bench/gpu_vs_llamacpp.sh $OUT/vs --shapes qwen3-0.6b,qwen3-8b --rounds 1 \
  --keep-models --deadline 240 --run-timeout 90 --flashlane $FL 2>&1 | tail -30
echo "vs at $(el) s"
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
left=$(( 570 - $(el) )); [ $left -gt 20 ] && timeout $left $B/backend_cuda --ignored matmul_kernel_times --nocapture --test-threads 1 > $OUT/matmul_times.txt 2>&1
echo "times at $(el) s"
grep -E "rows +(32|48|64):" $OUT/matmul_times.txt | grep -E "4B" | head -12
echo "total $(el) s"
