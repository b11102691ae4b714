#!/usr/bin/env bash
# Session 36, call 4: the FP8 tiles with their weights staged in shared memory
# (FLASHLANE_FP8_STAGES=N, a cp.async ring per warp; 0 = registers, the default): the FP8 kernel
# tests (the staged kernels against the register ones, bit for bit), then decode A/Bs on the FP8
# shapes. Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz
FLASHLANE_REQUIRE_GPU=1 timeout 200 $b/backend_cuda fp8 --test-threads 1 > $OUT/tests_fp8.txt 2>&1
el "fp8 tests rc=$?"; tail -5 $OUT/tests_fp8.txt
S="reg:FLASHLANE_AB=1 st2:FLASHLANE_FP8_STAGES=2 st4:FLASHLANE_FP8_STAGES=4 st8:FLASHLANE_FP8_STAGES=8"
for shape in qwen3-next-a3b-slice-fp8 qwen3-4b-fp8; do
  [ $(( $(date +%s) - T0 )) -gt 420 ] && break
  SETTINGS="$S" STREAMS=1,8,64 ROUNDS=2 timeout 200 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_fp8_stages.txt
  tail -3 /tmp/ab_$shape.log
done
