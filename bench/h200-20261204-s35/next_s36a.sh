#!/usr/bin/env bash
# Prepared in session 35 for the next device session (not yet run): the L2 prefetch bound
# (16 MiB by default since cc63cf8) against prefetching every matrix (the old behaviour) where
# session 35 did not measure it: 32 and 64 streams on the dense and hybrid shapes, and the FP8
# shapes at 1, 8 and 64 streams; then the one-row kernel choices and PDL on Qwen3-4B and -8B
# without the large prefetches. Carry bench/peers/flashlane.xz (bench/pack_gpu_tests.sh --flashlane).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
S="max16:FLASHLANE_AB=1 every:FLASHLANE_MATMUL_PREFETCH_MAX_MB=1000000"
for shape in qwen3-4b qwen3-8b qwen3-next-a3b-slice qwen3-0.6b; do
  SETTINGS="$S" STREAMS=32,64 ROUNDS=2 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_prefetch_many.txt
done
for shape in qwen3-next-a3b-slice-fp8 qwen3-4b-fp8; do
  SETTINGS="$S" STREAMS=1,8,64 ROUNDS=2 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_prefetch_fp8.txt
done
# The one-row kernel choices and programmatic dependent launch were chosen with every matrix
# prefetched; again on the large dense shapes without it (same bits).
S2="base:FLASHLANE_AB=1 nofit:FLASHLANE_MATMUL_FIT=0 nodeep:FLASHLANE_MATMUL_DEEP=0 nopdl:FLASHLANE_PDL=0"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S2" STREAMS=1,8 ROUNDS=1 bench/gpu_ab.sh /tmp/ab2_$shape $shape $FL > /dev/null 2>&1
  el "$shape choices rc=$?"
  cat /tmp/ab2_$shape/ab.txt | tee -a $OUT/ab_choices.txt
done
# The bound itself on the A3B slice, whose 16 MiB output projections sit on it: 8 MiB (they do
# not prefetch), 16 (the default), 32.
SETTINGS="max8:FLASHLANE_MATMUL_PREFETCH_MAX_MB=8 max16:FLASHLANE_AB=1 max32:FLASHLANE_MATMUL_PREFETCH_MAX_MB=32" \
  STREAMS=1,8 ROUNDS=2 bench/gpu_ab.sh /tmp/ab3 qwen3-next-a3b-slice $FL > /dev/null 2>&1
el "a3b bound rc=$?"; cat /tmp/ab3/ab.txt | tee -a $OUT/ab_bound_a3b.txt
