#!/usr/bin/env bash
# Session 33, call 2: the two switches that kept their bits in call 1, further. A/B:
# the grouped bound at 16 and 32 rows on every shape at 16–64 streams, and the few-warp norms on
# the A3B slice and Qwen3-4B at 1 and 8 streams; then all six GPU test
# binaries with both on (few-warp norms; decode attention grouped from 16 rows).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
G="base:FLASHLANE_AB=1 g16:FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=16 g32:FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=32"
for shape in qwen3-4b qwen3-0.6b qwen3-next-a3b-slice; do
  SETTINGS="$G" STREAMS=16,32,64 ROUNDS=2 bench/gpu_ab.sh /tmp/ab_g_$shape $shape $FL > /dev/null 2>&1
  el "grouped $shape rc=$?"; cat /tmp/ab_g_$shape/ab.txt; cat /tmp/ab_g_$shape/ab.txt >> $OUT/ab_grouped.txt
done
for shape in qwen3-next-a3b-slice qwen3-4b; do
  SETTINGS="base:FLASHLANE_AB=1 fewnorm:FLASHLANE_NORM_FEW_WARPS=1" STREAMS=1,8 ROUNDS=2 bench/gpu_ab.sh /tmp/ab_n_$shape $shape $FL > /dev/null 2>&1
  el "fewnorm $shape rc=$?"; cat /tmp/ab_n_$shape/ab.txt; cat /tmp/ab_n_$shape/ab.txt >> $OUT/ab_fewnorm.txt
done
SETTINGS="both:FLASHLANE_NORM_FEW_WARPS=1,FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=16" bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt; cp /tmp/tests/summary.txt $OUT/tests_summary.txt
