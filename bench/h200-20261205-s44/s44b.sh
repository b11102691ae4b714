#!/usr/bin/env bash
# Session 44: the dense 16-row matmuls' first weight loads before the wait for the kernel ahead
# (FLASHLANE_MATMUL_EARLY_WEIGHTS=1, off by default).
# 1. The matmul kernel tests with it on (bf16, SwiGLU, FP8): the same bits as every other kernel.
# 2. Where they pass, decode at 1, 2 and 8 streams, default against early, two interleaved
#    rounds, on Qwen3-0.6B, Qwen3-4B, the A3B slice and Qwen3-4B-FP8 (dummy weights).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the model moved out); ~300 s.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
ok=1
for t in matmul_matches_backend gate_up_swiglu fp8_matmul_matches; do
  FLASHLANE_MATMUL_EARLY_WEIGHTS=1 FLASHLANE_REQUIRE_GPU=1 timeout 120 $b/backend_cuda "$t" --test-threads 1 >> $OUT/tests_early.txt 2>&1
  rc=$?; el "backend_cuda $t rc=$rc"; [ $rc = 0 ] || ok=0
done
grep -E "^test .*(ok|FAILED)|test result|panicked" $OUT/tests_early.txt | tail -12
[ $ok = 1 ] || exit 1
S="base:FLASHLANE_AB=1 early:FLASHLANE_MATMUL_EARLY_WEIGHTS=1"
for shape in qwen3-0.6b qwen3-4b qwen3-next-a3b-slice qwen3-4b-fp8; do
  SETTINGS="$S" STREAMS=1,2,8 NEW_TOKENS=96 ROUNDS=2 timeout 150 bench/gpu_ab.sh /tmp/ew_$shape $shape $FL > /tmp/ew_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ew_$shape/ab.txt /tmp/ew_$shape/ab_means.txt | tee -a $OUT/ab_early.txt
done
