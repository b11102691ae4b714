#!/usr/bin/env bash
# Session 47, call 5: the DeltaNet recurrence split over a cluster at every short-window step
# (`FLASHLANE_DELTANET_SPLIT=1`) against the default (split only where the (window, head)
# blocks do not fill the multiprocessors). `deltanet_recurrence` runs 512 threads of 128
# registers, one block a multiprocessor; the split's 128-thread blocks sit four to one. The
# split's kernel test and the whole-model tests with it on, then A/B on the A3B slice (bf16 at
# 8-64 streams, FP8 at 32 and 64). Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 100 $b/backend_cuda deltanet --test-threads 1 > $OUT/tests_split.txt 2>&1
el "backend_cuda deltanet rc=$?"; grep -E "^test |test result" $OUT/tests_split.txt
TESTS="gpu_conformance gpu_target" SETTINGS="split:FLASHLANE_DELTANET_SPLIT=1" \
  timeout 120 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests/summary.txt
S="base:FLASHLANE_AB=1 split:FLASHLANE_DELTANET_SPLIT=1"
SETTINGS="$S" STREAMS=8,16,32,64 NEW_TOKENS=64 ROUNDS=2 timeout 170 bench/gpu_ab.sh /tmp/ab_bf16 qwen3-next-a3b-slice $FL > /dev/null 2>&1
el "bf16 rc=$?"; cat /tmp/ab_bf16/ab.txt /tmp/ab_bf16/ab_means.txt | tee $OUT/ab_split.txt
SETTINGS="$S" STREAMS=32,64 NEW_TOKENS=64 ROUNDS=2 timeout 120 bench/gpu_ab.sh /tmp/ab_fp8 qwen3-next-a3b-slice-fp8 $FL > /dev/null 2>&1
el "fp8 rc=$?"; cat /tmp/ab_fp8/ab.txt /tmp/ab_fp8/ab_means.txt | tee -a $OUT/ab_split.txt
