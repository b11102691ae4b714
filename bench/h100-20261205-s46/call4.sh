#!/usr/bin/env bash
# Session 46, call 4 (binaries at ef76c04, COMMIT set by the caller):
# 1. the whole-model GPU tests at the new defaults (the tiles' early weights in dense models;
#    hybrid models' FP8 decode rounds of 17-64 rows on the swapped warpgroup split:
#    gpu_conformance runs a Qwen3-Next FP8 fixture through the lane);
# 2. the A3B slice's FP8 twin, the new default against FLASHLANE_MATMUL_WG_SPLIT=0 (which
#    leaves the warpgroup module uncompiled in hybrid models: the old default) at 8-64 streams;
# (call5.sh: the same-run llama.cpp table; both packs and the default model do not fit one call's
# 64 MiB.) Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults" timeout 150 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests/summary.txt
grep -h -B 2 -A 20 "panicked\|FAILED" $OUT/tests/*.log | head -60 > $OUT/failures.txt
. bench/unpack_peers.sh
S="base:FLASHLANE_AB=1 off:FLASHLANE_MATMUL_WG_SPLIT=0"
SETTINGS="$S" STREAMS=8,24,40,64 NEW_TOKENS=64 ROUNDS=2 timeout 80 bench/gpu_ab.sh /tmp/hy qwen3-next-a3b-slice-fp8 $FL > /dev/null 2>&1
el "a3b-slice-fp8 rc=$?"
cat /tmp/hy/ab.txt /tmp/hy/ab_means.txt | tee $OUT/ab_hybrid_fp8.txt
