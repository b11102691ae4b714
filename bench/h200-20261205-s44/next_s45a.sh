#!/usr/bin/env bash
# Prepared in session 44 for the next device session's first call.
# 1. The six GPU test binaries at this session's last defaults (the swapped warpgroup split for
#    FP8 rounds of 17-64 rows and bf16 rounds of 17-24 in dense models from Qwen3-4B up; the
#    dense models' early weight loads), then with every split of up to 64 rows forced onto the
#    swapped warpgroup MMA in every model (FLASHLANE_MATMUL_SPLIT_K=1: the test models are too
#    small to split k by default, so only then do these binaries reach the split kernels;
#    FLASHLANE_MATMUL_WGMMA=1 compiles the warpgroup module in them). Session 44's call 3 passed
#    the first setting at d8689ed's defaults and was cut in the second. ~350 s on an H200.
# 2. The defaults against FLASHLANE_MATMUL_WG_SPLIT=0 at 24, 40 and 64 streams on Qwen3-4B-FP8
#    and -8B-FP8 (40: the FP8 rounds of 33-47 rows that split since 1aa54ef, not yet measured)
#    and Qwen3-4B at 24 (the bf16 bound). ~150 s.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default model moved out).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
S="base:FLASHLANE_AB=1 wg:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_WGMMA=1,FLASHLANE_MATMUL_WG_SPLIT=1,FLASHLANE_MATMUL_EARLY_WEIGHTS=1"
SETTINGS="$S" timeout 420 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests/*/summary.txt
grep -h -B 2 -A 20 "panicked\|FAILED" $OUT/tests/*/*.log | head -60 > $OUT/failures.txt
. bench/unpack_peers.sh
S="base:FLASHLANE_AB=1 off:FLASHLANE_MATMUL_WG_SPLIT=0"
for shape in qwen3-4b-fp8 qwen3-8b-fp8 qwen3-4b; do
  streams=24,40,64; [ $shape = qwen3-4b ] && streams=24
  SETTINGS="$S" STREAMS=$streams NEW_TOKENS=64 ROUNDS=2 timeout 80 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt /tmp/ab_$shape/ab_means.txt | tee -a $OUT/ab_wg_split.txt
done
