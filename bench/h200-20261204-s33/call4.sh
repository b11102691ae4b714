#!/usr/bin/env bash
# Session 33, call 4: call 3's gpu_conformance failure (alone = batched on the dense fixture,
# heads of 16) came from the per-head and grouped attention fusing `acc·c + e·v` differently;
# both now write the multiply-adds out (`att_rescale_add`; their PTX arithmetic unchanged on the
# real shapes). Carry as call 3.
# 1. the attention kernel tests (the fixture's narrow heads among them); all six GPU binaries;
# 2. a speed check as built on Qwen3-0.6B and the A3B slice at 1 and 32 streams.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz
FLASHLANE_REQUIRE_GPU=1 timeout 120 $bin/backend_cuda --test-threads 1 attention > $OUT/kernel_tests.log 2>&1
el "attention kernel tests rc=$?"; grep "^test \|test result\|panicked" $OUT/kernel_tests.log | head -20
bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt; cp /tmp/tests/summary.txt $OUT/tests_summary.txt
: > $OUT/failures.txt
for log in /tmp/tests/*.log; do
  grep -q "test result: FAILED" "$log" || continue
  { echo "== $log"; grep -A12 "^---- \|panicked" "$log" | head -120; } >> $OUT/failures.txt
done
for shape in qwen3-0.6b qwen3-next-a3b-slice; do
  STREAMS=1,32 ROUNDS=2 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "speed $shape rc=$?"; cat /tmp/ab_$shape/ab.txt; cat /tmp/ab_$shape/ab.txt >> $OUT/speed.txt
done
