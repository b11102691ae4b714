#!/usr/bin/env bash
# Session 31, call 5: a split gate/up's SwiGLU in its fold (`matmul_fold_residues_swiglu`):
# the matmul and SwiGLU kernel tests (bits), then its A/B on the Qwen3-4B shape at 48 and 64
# streams, where the k split runs (`FLASHLANE_SWIGLU_IN_GATE_UP=0`: apart, as before).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 200 $bin/backend_cuda --test-threads 1 swiglu > $OUT/kernel_swiglu.log 2>&1
el "swiglu tests rc=$?"; grep "test \|test result" $OUT/kernel_swiglu.log
FLASHLANE_REQUIRE_GPU=1 timeout 150 $bin/backend_cuda --test-threads 1 matmul_matches > $OUT/kernel_matmul.log 2>&1
el "matmul tests rc=$?"; grep "test \|test result" $OUT/kernel_matmul.log
SETTINGS="fold:FLASHLANE_AB=1 apart:FLASHLANE_SWIGLU_IN_GATE_UP=0" STREAMS=48,64 ROUNDS=2 \
  bench/gpu_ab.sh /tmp/ab4 qwen3-4b $FL > /dev/null 2>&1
el "ab 4b rc=$?"; cat /tmp/ab4/ab.txt; cp /tmp/ab4/ab.txt $OUT/ab_qwen3-4b.txt
