#!/usr/bin/env bash
# Session 31, call 1: in the background, llama.cpp built and the Qwen3-0.6B, A3B slice and
# Qwen3-4B checkpoints made (`--prepare-only --keep-models`) for call 2's same-run table on the
# still warm machine; meanwhile the SwiGLU-in-gate/up kernels (FLASHLANE_SWIGLU_IN_GATE_UP=1)
# checked bit for bit (backend_cuda, gpu_dense) and timed against the default (bench/gpu_ab.sh).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,llama.cpp.tar.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
FLASHLANE_COMMIT=prep nice -n 15 bench/gpu_vs_llamacpp.sh /tmp/prep \
  --shapes qwen3-0.6b,qwen3-next-a3b-slice,qwen3-4b --prepare-only --keep-models --flashlane $FL \
  > /tmp/prep.log 2>&1 &
PREP=$!
TESTS="backend_cuda gpu_dense" SETTINGS="fused:FLASHLANE_SWIGLU_IN_GATE_UP=1" bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt
grep -h "FAILED\|panicked\|failed" /tmp/tests/fused/*.log | head -20
cp /tmp/tests/summary.txt $OUT/tests_summary.txt
tar -C /tmp -cJf $OUT/tests_logs.tar.xz tests
SETTINGS="fused:FLASHLANE_SWIGLU_IN_GATE_UP=1 apart:FLASHLANE_AB=1" STREAMS=1,8,32,64 ROUNDS=2 \
  bench/gpu_ab.sh /tmp/ab06 qwen3-0.6b $FL > /dev/null 2>&1
el "ab 0.6b rc=$?"; cat /tmp/ab06/ab.txt
cp /tmp/ab06/ab.txt $OUT/ab_qwen3-0.6b.txt
SETTINGS="fused:FLASHLANE_SWIGLU_IN_GATE_UP=1 apart:FLASHLANE_AB=1" STREAMS=1,8,64 ROUNDS=2 \
  bench/gpu_ab.sh /tmp/ab4 qwen3-4b $FL > /dev/null 2>&1
el "ab 4b rc=$?"; cat /tmp/ab4/ab.txt
cp /tmp/ab4/ab.txt $OUT/ab_qwen3-4b.txt
while kill -0 $PREP 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt 585 ]; do sleep 2; done
tail -8 /tmp/prep.log; cp /tmp/prep.log $OUT/prep.log
el "total"
