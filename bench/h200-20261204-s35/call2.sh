#!/usr/bin/env bash
# Session 35, call 2 (a probe binary, not main: FLASHLANE_PROBE_SKIP leaves launches out, so
# the replies are wrong and only the times count): what the RMSNorm launches and the attention
# prep launches cost a decode step, on Qwen3-0.6B, the A3B slice and Qwen3-4B at 1 and 8 streams.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
S="base:FLASHLANE_AB=1 nonorm:FLASHLANE_PROBE_SKIP=norm noprep:FLASHLANE_PROBE_SKIP=prep neither:FLASHLANE_PROBE_SKIP=norm,prep"
for shape in qwen3-0.6b qwen3-next-a3b-slice qwen3-4b; do
  SETTINGS="$S" STREAMS=1,8 ROUNDS=2 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/probe.txt
done
