#!/usr/bin/env bash
# Session 35, call 1: where a round's wall time goes (FLASHLANE_ROUND_CLOCK=1: CUDA events around
# each round's launches against the time from one round's results to the next's), on Qwen3-0.6B,
# the A3B slice and Qwen3-4B at 1, 8 and 64 streams; each shape also once without the clock
# (what the events cost).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
for shape in qwen3-0.6b qwen3-next-a3b-slice qwen3-4b; do
  SETTINGS="clock:FLASHLANE_ROUND_CLOCK=1 plain:FLASHLANE_AB=1" STREAMS=1,8,64 ROUNDS=1 \
    bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  { cat /tmp/ab_$shape/ab.txt; grep -h -A 20 "round clock" /tmp/ab_$shape/*clock*.err; } | tee -a $OUT/clock.txt
done
