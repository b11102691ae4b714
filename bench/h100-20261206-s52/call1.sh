#!/usr/bin/env bash
# Session 52, after the A/B of bench/h100-20261206-s51/next_s52b.sh set the new defaults (the MoE's
# norm apart again; the swapped chain for bf16 rounds of up to 2 rows and FP8 rounds of up to 8):
# 1. the five whole-model GPU test binaries at those defaults (alone = batched = moved = with
#    drafts, bit for bit), then the kernel tests of the swapped chain, the norm twins and the MoE;
# 2. the bf16 swapped chain's bound on Qwen3-4B and -0.6B at 2, 4 and 8 streams (2: the default;
#    4; 8), the one question the A/B left (8 rows of 4B ran 0.95×).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default model moved out
# of the tree for the call); ~330 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
TESTS="gpu_target gpu_conformance gpu_dense gpu_fixtures gpu_faults" TEST_TIMEOUT=120 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; cat /tmp/tests/summary.txt | tee $OUT/tests_summary.txt
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 150 $b/backend_cuda norm_twins moe_ swap --test-threads 1 > $OUT/tests_kernels.txt 2>&1
el "backend_cuda norm_twins moe_ swap rc=$?"; grep -E "test result|panicked|FAILED" $OUT/tests_kernels.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
ab() {  # OUT_NAME SHAPE STREAMS SETTINGS BINARY...
  local name=$1 shape=$2 streams=$3 settings=$4; shift 4
  SETTINGS="$settings" STREAMS=$streams NEW_TOKENS=64 ROUNDS=2 RUN_TIMEOUT=90 \
    bench/gpu_ab.sh /tmp/ab_$name $shape "$@" > /dev/null 2>&1
  el "A/B $name rc=$?"; cat /tmp/ab_$name/ab.txt /tmp/ab_$name/ab_means.txt | tee -a $OUT/ab.txt
}
BOUNDS="s2:FLASHLANE_AB=1 s4:FLASHLANE_MATMUL_SWAP_ROWS=4 s8:FLASHLANE_MATMUL_SWAP_ROWS=8"
ab q4b_bound qwen3-4b 2,4,8 "$BOUNDS" $FL
ab q06_bound qwen3-0.6b 2,4,8 "$BOUNDS" $FL
