#!/usr/bin/env bash
# Session 35, call 4: the matmuls' L2 prefetch by block (FLASHLANE_MATMUL_PREFETCH_BLOCKS: only
# the first N blocks of a grid pull their rows into L2; the same bits), as built (all) against
# the first 264 (two a multiprocessor), the first 132 and none, on Qwen3-4B, -8B and -0.6B at 1
# and 8 streams, one round.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
S="all:FLASHLANE_AB=1 pf264:FLASHLANE_MATMUL_PREFETCH_BLOCKS=264 pf132:FLASHLANE_MATMUL_PREFETCH_BLOCKS=132 none:FLASHLANE_MATMUL_PREFETCH_BLOCKS=0"
for shape in qwen3-4b qwen3-8b qwen3-0.6b; do
  SETTINGS="$S" STREAMS=1,8 ROUNDS=1 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_prefetch.txt
done
