#!/usr/bin/env bash
# Session 46, call 2: the three GPU test binaries call 1's limit cut under the forced
# setting (every split of up to 64 rows on the swapped warpgroup MMA, early weights in every
# model), then session 45's `next_s45a.sh` part 2: the defaults against
# FLASHLANE_MATMUL_WG_SPLIT=0 at 24, 40 and 64 streams on Qwen3-4B-FP8 and -8B-FP8 (40: FP8
# rounds of 33-47 rows, split since 1aa54ef, unmeasured) and Qwen3-4B at 24 (the bf16 bound).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
S="wg:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_WGMMA=1,FLASHLANE_MATMUL_WG_SPLIT=1,FLASHLANE_MATMUL_EARLY_WEIGHTS=1"
TESTS="gpu_target gpu_fixtures gpu_faults" SETTINGS="$S" timeout 200 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests/summary.txt
grep -h -B 2 -A 20 "panicked\|FAILED" $OUT/tests/*/*.log | head -60 > $OUT/failures.txt
. bench/unpack_peers.sh
S="base:FLASHLANE_AB=1 off:FLASHLANE_MATMUL_WG_SPLIT=0"
for shape in qwen3-4b-fp8 qwen3-8b-fp8 qwen3-4b; do
  streams=24,40,64; [ $shape = qwen3-4b ] && streams=24
  SETTINGS="$S" STREAMS=$streams NEW_TOKENS=64 ROUNDS=2 timeout 100 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt /tmp/ab_$shape/ab_means.txt | tee -a $OUT/ab_wg_split.txt
done
