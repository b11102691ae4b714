#!/usr/bin/env bash
# Session 35, call 5: every GPU test with the matmuls' L2 prefetch limited to matrices of at most
# 16 MiB (FLASHLANE_MATMUL_PREFETCH_MAX_MB=16; the bits do not depend on it), then the limit
# A/B'd (as built: every matrix; 16 MiB; 64 MiB) on the A3B slice, Qwen3-4B, -8B and -0.6B at 1
# and 8 streams, one round.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
SETTINGS="max16:FLASHLANE_MATMUL_PREFETCH_MAX_MB=16" bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt | tee $OUT/tests_summary.txt
grep -h -B 2 -A 20 "panicked\|FAILED" /tmp/tests/max16/*.log | head -60 > $OUT/failures.txt
S="all:FLASHLANE_AB=1 max16:FLASHLANE_MATMUL_PREFETCH_MAX_MB=16 max64:FLASHLANE_MATMUL_PREFETCH_MAX_MB=64"
for shape in qwen3-next-a3b-slice qwen3-4b qwen3-8b qwen3-0.6b; do
  SETTINGS="$S" STREAMS=1,8 ROUNDS=1 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_prefetch_max.txt
done
