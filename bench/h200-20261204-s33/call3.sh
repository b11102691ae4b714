#!/usr/bin/env bash
# Session 33, call 3, at the commit that makes 32 rows the grouped attention's bound (128 before)
# and drops the fused prep and few-warp norms. Here first: move
# models/flashlane-tiny/model.safetensors out of the tree, `bench/pack_gpu_tests.sh --flashlane`,
# carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
# 1. all six GPU test binaries as built; every failing test's panic into failures.txt, and a
#    failing backend_cuda again with the old bound (128) to tell whether the bound is the cause;
# 2. A/B as built (32) against 128 on Qwen3-8B (not measured in call 2) and Qwen3-0.6B at 16–64.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt; cp /tmp/tests/summary.txt $OUT/tests_summary.txt
: > $OUT/failures.txt
for log in /tmp/tests/*.log; do
  grep -q "test result: FAILED" "$log" || continue
  { echo "== $log"; grep -A12 "^---- \|panicked" "$log" | head -120; } >> $OUT/failures.txt
done
if grep -q "^backend_cuda rc=[^0]" /tmp/tests/summary.txt; then
  bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz
  FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=128 FLASHLANE_REQUIRE_GPU=1 timeout 300 $bin/backend_cuda --test-threads 1 > /tmp/bc128.log 2>&1
  el "backend_cuda at 128 rc=$?"; grep "test result\|^---- \|panicked" /tmp/bc128.log | head -30 | tee $OUT/backend_cuda_128.txt
fi
for shape in qwen3-8b qwen3-0.6b; do
  SETTINGS="g32:FLASHLANE_AB=1 g128:FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=128" STREAMS=16,32,64 ROUNDS=2 \
    bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "ab $shape rc=$?"; cat /tmp/ab_$shape/ab.txt; cat /tmp/ab_$shape/ab.txt >> $OUT/ab_grouped.txt
done
