#!/usr/bin/env bash
# Prepared in session 48, for the call after next_s49a.sh if its FP8 widen test passed: A/B of
# FLASHLANE_FP8_WIDEN=1 and =2 against the conversions on the FP8 shapes (dummy weights, 2
# interleaved rounds, decode at 1 / 8 / 64 streams and prefill). Carry bench/peers/flashlane.xz;
# ~260 s on an H100 (six bench runs a shape).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
S="base:FLASHLANE_AB=1 w1:FLASHLANE_FP8_WIDEN=1 w2:FLASHLANE_FP8_WIDEN=2"
for run in "qwen3-4b-fp8 1,8,64" "qwen3-next-a3b-slice-fp8 1,8,64"; do
  set -- $run
  SETTINGS="$S" STREAMS=$2 NEW_TOKENS=64 ROUNDS=2 RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_$1 $1 $FL > /dev/null 2>&1
  el "widen $1 rc=$?"; cat /tmp/ab_$1/ab.txt /tmp/ab_$1/ab_means.txt | tee -a $OUT/ab_widen.txt
done
