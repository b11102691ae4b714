#!/usr/bin/env bash
# Session 22, call 4: the k split and the few-warp attention on by default where call 2 found
# them faster (48-64 rows of wide matrices; heads of at most 128), the one-head attention order
# kept: every GPU test at this commit, then the defaults against both switches off
# (FLASHLANE_MATMUL_SPLIT_K=0, FLASHLANE_ATTENTION_FEW_WARPS=0) on the Qwen3-0.6B, -4B and -8B
# shapes and the A3B slice.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
SETTINGS="" TESTS_SECONDS=200 timeout 205 bench/gpu_session.sh $OUT/session
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log 2>/dev/null | head -8
echo "tests at $(el) s"
for shape in qwen3-4b qwen3-next-a3b-slice qwen3-0.6b qwen3-8b; do
  rounds=1; [ $shape = qwen3-4b ] && rounds=2
  SETTINGS="new:FLASHLANE_AB=1 off:FLASHLANE_MATMUL_SPLIT_K=0,FLASHLANE_ATTENTION_FEW_WARPS=0" \
    ROUNDS=$rounds STREAMS=1,32,64 timeout 150 bench/gpu_ab.sh /tmp/ab-$shape $shape $FL > /dev/null 2>&1
  echo "A/B $shape rc=$? at $(el) s"; { echo "== $shape"; cat /tmp/ab-$shape/ab.txt; } | tee -a $OUT/ab.txt
  [ $(el) -gt 480 ] && break
done
echo "total $(el) s"
