#!/usr/bin/env bash
# Session 36, call 5: the k split's partials kept in L2 (FLASHLANE_MATMUL_SPLIT_L2_HINTS=1: weights
# copied evict-first, partials stored evict-last, their lines discarded by the folds once read;
# cache hints only). The matmul and SwiGLU kernel tests under it (the split against the other
# kernels, bit for bit), the decode A/B on Qwen3-4B and -8B at 32 and 64 streams, then gpu_dense
# with the split forced and gpu_conformance under it.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz
for f in matmul swiglu split; do
  FLASHLANE_MATMUL_SPLIT_L2_HINTS=1 FLASHLANE_REQUIRE_GPU=1 timeout 120 $b/backend_cuda $f --test-threads 1 >> $OUT/tests_hints.txt 2>&1
  el "backend_cuda $f rc=$?"
done
grep -E "^test |test result" $OUT/tests_hints.txt | tail -20
S="base:FLASHLANE_AB=1 hints:FLASHLANE_MATMUL_SPLIT_L2_HINTS=1"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S" STREAMS=32,64 ROUNDS=2 timeout 150 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_hints.txt
done
FLASHLANE_MATMUL_SPLIT_L2_HINTS=1 FLASHLANE_MATMUL_SPLIT_K=1 FLASHLANE_REQUIRE_GPU=1 timeout 100 $b/gpu_dense --test-threads 1 > $OUT/gpu_dense_hints_split.txt 2>&1
el "gpu_dense rc=$?"; tail -3 $OUT/gpu_dense_hints_split.txt
FLASHLANE_MATMUL_SPLIT_L2_HINTS=1 FLASHLANE_REQUIRE_GPU=1 timeout 100 $b/gpu_conformance --test-threads 1 > $OUT/gpu_conformance_hints.txt 2>&1
el "gpu_conformance rc=$?"; tail -3 $OUT/gpu_conformance_hints.txt
