#!/usr/bin/env bash
# Session 18, call 3: GPU tests at the new kernels (deep by default with x ahead and one block a
# multiprocessor; narrow bf16 with x ahead; FP8 wide at depth 1; no FP8 fit), then A/B of the
# old binary (fbc4a33's kernels) against the new on four shapes, then the kernel timings.
set -u
T0=$(date +%s)
xz -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
OLD=/tmp/fl_old; xz -dc bench/peers/flashlane-old.xz > $OLD; chmod +x $OLD
NEW=/tmp/fl_new; xz -dc bench/peers/flashlane.xz > $NEW; chmod +x $NEW
W=/tmp/w3; mkdir -p $W
SETTINGS="" timeout 200 bench/gpu_tests.sh $W/tests > /dev/null 2>&1
echo "tests rc=$? at $(( $(date +%s) - T0 )) s"
cp $W/tests/summary.txt $OUT/tests_summary.txt; cat $OUT/tests_summary.txt
grep -h "panicked\|FAILED" $W/tests/*.log $W/tests/*/*.log 2>/dev/null | head -8
for shape in qwen3-4b qwen3-next-a3b-slice qwen3-next-a3b-slice-fp8 qwen3-4b-fp8; do
  ROUNDS=2 STREAMS=1,8,64 timeout 90 bench/gpu_ab.sh $W/ab-$shape $shape $OLD $NEW > /dev/null 2>&1
  { echo "== $shape (bin1 old, bin2 new)"; cat $W/ab-$shape/ab.txt; } | tee -a $OUT/ab.txt
  echo "ab $shape at $(( $(date +%s) - T0 )) s"
done
left=$(( 560 - ($(date +%s) - T0) ))
if [ $left -gt 60 ]; then
  mkdir -p $W/bins && tar -C $W/bins -xJf bench/peers/gpu-tests.tar.xz
  timeout $left $W/bins/backend_cuda --ignored kernel_define_times --nocapture --test-threads 1 > $OUT/timings.txt 2>&1
  echo "timings rc=$? at $(( $(date +%s) - T0 )) s"
fi
tar -C $W -cJf $OUT/raw.tar.xz tests ab-qwen3-4b ab-qwen3-next-a3b-slice ab-qwen3-next-a3b-slice-fp8 ab-qwen3-4b-fp8 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
