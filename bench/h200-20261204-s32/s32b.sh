#!/usr/bin/env bash
# Session 32, call 2: the norm in the 16-row matmuls (matmul_bf16_norm_*, NormPlace::InMatmul).
# 1. its kernel tests (twins' bits against rmsnorm_rows then the plain kernel) and the matmul,
#    SwiGLU and norm tests beside them;
# 2. A/B on Qwen3-0.6B and -4B at 1-8 streams: the default bound (4 rows), every norm apart (0),
#    and 16 rows;
# 3. every GPU test, while llama.cpp is built and the 0.6B and 4B checkpoints are made in the
#    background for call 3's same-run table.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,llama.cpp.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 150 $bin/backend_cuda --test-threads 1 norm swiglu matmul_matches > $OUT/kernel_tests.log 2>&1
el "kernel tests rc=$?"; grep "^test \|test result\|panicked" $OUT/kernel_tests.log | head -20
for shape in qwen3-0.6b qwen3-4b; do
  SETTINGS="in4:FLASHLANE_AB=1 apart:FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=0 in16:FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=16" \
    STREAMS=1,2,4,8 ROUNDS=2 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "ab $shape rc=$?"; cat /tmp/ab_$shape/ab.txt; cp /tmp/ab_$shape/ab.txt $OUT/ab_$shape.txt
done
FLASHLANE_COMMIT=prep nice -n 15 bench/gpu_vs_llamacpp.sh /tmp/prep \
  --shapes qwen3-0.6b,qwen3-4b --prepare-only --keep-models --flashlane $FL \
  > /tmp/prep.log 2>&1 &
PREP=$!
bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt
grep -h "FAILED\|panicked" /tmp/tests/*.log | head -20
cp /tmp/tests/summary.txt $OUT/tests_summary.txt
tar -C /tmp -cJf $OUT/tests_logs.tar.xz tests
while kill -0 $PREP 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt 585 ]; do sleep 2; done
tail -4 /tmp/prep.log; cp /tmp/prep.log $OUT/prep.log
el "total"
