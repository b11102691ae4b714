#!/usr/bin/env bash
# Session 22, call 5: the k split for every 48-64-row matmul the tiles do not take (the new
# default) against none split, 64 streams, on the Qwen3-4B and -0.6B shapes and the A3B slice.
set -u
T0=$(date +%s)
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
for shape in qwen3-4b qwen3-0.6b qwen3-next-a3b-slice; do
  SETTINGS="all:FLASHLANE_AB=1 off:FLASHLANE_MATMUL_SPLIT_K=0" ROUNDS=1 STREAMS=64 timeout 60 \
    bench/gpu_ab.sh /tmp/ab-$shape $shape $FL > /dev/null 2>&1
  { echo "== $shape"; cat /tmp/ab-$shape/ab.txt; } | tee -a $OUT/ab.txt
  echo "at $(( $(date +%s) - T0 )) s"
done
