#!/usr/bin/env bash
# Session 31, call 7: the k split walked by resident blocks (FLASHLANE_MATMUL_SPLIT_WALK=1): the
# matmul and SwiGLU kernel tests (TiledSplitWalk's bits), then Qwen3-4B at 64 streams: the
# binary at fbea7e4 against this one (7a6cb0c: the tiles' products moved into
# tiled_multiply_stage), as built and walking.
# Carry bench/peers/{flashlane.xz,flashlane_fbea7e4.xz,gpu-tests.tar.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
xz -dc bench/peers/flashlane_fbea7e4.xz > /tmp/fl_old && chmod +x /tmp/fl_old
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 60 $bin/backend_cuda --test-threads 1 swiglu matmul_matches > $OUT/kernel_tests.log 2>&1
el "kernel tests rc=$?"; grep "test \|test result\|panicked" $OUT/kernel_tests.log
SETTINGS="built:FLASHLANE_AB=1 walk:FLASHLANE_MATMUL_SPLIT_WALK=1" STREAMS=64 ROUNDS=2 \
  bench/gpu_ab.sh $OUT/ab qwen3-4b $FL /tmp/fl_old > /dev/null 2>&1
el "ab rc=$?"; cat $OUT/ab/ab.txt
rm -f $OUT/ab/*.json $OUT/ab/*.err
