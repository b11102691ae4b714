#!/usr/bin/env bash
# Session 35, call 3: e4m3 → bf16 by bits in the FP8 tiles (one exact multiply instead of four
# conversions a pair). The kernel tests (the new e4m3_pairs_by_bits_are_the_conversions, the FP8
# matmul and MoE against backend-cpu), then old (HEAD + the round clock) against new on the FP8
# shapes at 1, 8 and 64 streams, interleaved.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
xz -dc bench/peers/flashlane_old.xz > /tmp/fl_old && chmod +x /tmp/fl_old
TESTS=backend_cuda bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "kernel tests rc=$?"; cat /tmp/tests/summary.txt | tee $OUT/tests_summary.txt
grep -E "e4m3|fp8|FAILED|panicked" /tmp/tests/backend_cuda.log | head -20 | tee -a $OUT/tests_summary.txt
for shape in qwen3-next-a3b-slice-fp8 qwen3-4b-fp8; do
  STREAMS=1,8,64 ROUNDS=2 bench/gpu_ab.sh /tmp/ab_$shape $shape /tmp/fl_old $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_fp8.txt
done
