#!/usr/bin/env bash
# Session 34, call 10, the binaries of f451085 (carry as call 3): does grouping pay from 16 rows
# where a KV head has 4 query heads a group (Qwen3-4B and -8B; call 2 measured 4B +4 % at 16
# streams, and 0.6B, 2 heads a group, -10 %)? A/B 16 against the default 32 on 4B and 8B at
# 8, 16 and 24 streams; the dense GPU tests with the bound at 16.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="g32:FLASHLANE_AB=1 g16:FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=16" STREAMS=8,16,24 ROUNDS=2 \
    bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "ab $shape rc=$?"; cat /tmp/ab_$shape/ab.txt; cat /tmp/ab_$shape/ab.txt >> $OUT/ab_grouped16.txt
done
SETTINGS="g16:FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=16" TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures" \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt; cp /tmp/tests/summary.txt $OUT/tests_summary.txt
