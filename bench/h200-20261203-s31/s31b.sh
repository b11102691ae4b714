#!/usr/bin/env bash
# Session 31, call 2: every GPU test at 0cb43d3 (the SwiGLU in the gate/up matmul now on by
# default), while llama.cpp is built and the Qwen3-0.6B and Qwen3-4B checkpoints are made in the
# background (`--prepare-only --keep-models`) for call 3's same-run table on the warm machine.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,llama.cpp.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
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
tail -6 /tmp/prep.log; cp /tmp/prep.log $OUT/prep.log
el "total"
