#!/usr/bin/env bash
# Session 30, call 1: in the background, llama.cpp built and the Qwen3-0.6B, A3B slice and
# Qwen3-4B checkpoints made (`--prepare-only --keep-models`) for call 2's same-run table on the
# still warm machine; meanwhile where a 1-stream token of the A3B slice and of Qwen3-0.6B, and a
# 64-stream A3B round, go at this commit (bench/gpu_profile.sh, ncu, graphs off).
# Carry bench/peers/{flashlane.xz,llama.cpp.tar.xz} (nothing else needed).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
FLASHLANE_COMMIT=prep nice -n 15 bench/gpu_vs_llamacpp.sh /tmp/prep \
  --shapes qwen3-0.6b,qwen3-next-a3b-slice,qwen3-4b --prepare-only --keep-models --flashlane $FL \
  > /tmp/prep.log 2>&1 &
PREP=$!
NEW_TOKENS=12 RUN_TIMEOUT=150 bench/gpu_profile.sh /tmp/prof qwen3-next-a3b-slice $FL 1,64 > /dev/null 2>&1
el "a3b profile rc=$?"
NEW_TOKENS=12 RUN_TIMEOUT=120 bench/gpu_profile.sh /tmp/prof qwen3-0.6b $FL 1 > /dev/null 2>&1
el "0.6b profile rc=$?"
cp /tmp/prof/*.txt $OUT/ 2>/dev/null
tar -C /tmp -cJf $OUT/prof_csv.tar.xz prof
while kill -0 $PREP 2>/dev/null && [ $(( $(date +%s) - T0 )) -lt 585 ]; do sleep 2; done
tail -8 /tmp/prep.log; cp /tmp/prep.log $OUT/prep.log
ls -la $OUT
el "total"
