#!/usr/bin/env bash
# Session 32, call 5: the narrow kernel with x staged in shared memory (matmul_bf16_staged, one
# and two rows; FLASHLANE_MATMUL_STAGED, on by default): its kernel tests, A/B on Qwen3-0.6B at
# 1 and 2 streams against the narrow kernel, and gpu_target (whole-model bits).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz backend_cuda gpu_target
FLASHLANE_REQUIRE_GPU=1 timeout 40 $bin/backend_cuda --test-threads 1 swiglu matmul_matches > $OUT/kernel_tests.log 2>&1
el "kernel tests rc=$?"; grep "^test \|test result\|panicked" $OUT/kernel_tests.log | head -12
SETTINGS="staged:FLASHLANE_AB=1 narrow:FLASHLANE_MATMUL_STAGED=0" STREAMS=1,2 ROUNDS=2 \
  bench/gpu_ab.sh /tmp/ab qwen3-0.6b $FL > /dev/null 2>&1
el "ab rc=$?"; cat /tmp/ab/ab.txt; cp /tmp/ab/ab.txt $OUT/ab_0.6b.txt
FLASHLANE_REQUIRE_GPU=1 timeout 40 $bin/gpu_target --test-threads 1 > $OUT/gpu_target.log 2>&1
el "gpu_target rc=$?"; grep "test result\|panicked" $OUT/gpu_target.log | head -5
