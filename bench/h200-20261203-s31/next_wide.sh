#!/usr/bin/env bash
# Ready for the next device session (not run yet): the wide k split (FLASHLANE_MATMUL_SPLIT_WIDE=1,
# a36c5f8) checked and timed. Here first: move models/flashlane-tiny/model.safetensors out of the
# tree, `bench/pack_gpu_tests.sh --flashlane`, carry bench/peers/{flashlane.xz,gpu-tests.tar.xz}.
# 1. the matmul and SwiGLU kernel tests: TiledSplitWide's bits, the partials NaN before each
#    run, Auto through the split's fold at 48–64 rows;
# 2. Qwen3-4B and Qwen3-8B at 48 and 64 streams, as built against wide (two interleaved rounds).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 90 $bin/backend_cuda --test-threads 1 swiglu matmul_matches > $OUT/kernel_tests.log 2>&1
el "kernel tests rc=$?"; grep "test \|test result\|panicked" $OUT/kernel_tests.log
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="built:FLASHLANE_AB=1 wide:FLASHLANE_MATMUL_SPLIT_WIDE=1" STREAMS=48,64 ROUNDS=2 \
    bench/gpu_ab.sh $OUT/ab_$shape $shape $FL > /dev/null 2>&1
  el "ab $shape rc=$?"; cat $OUT/ab_$shape/ab.txt
  rm -f $OUT/ab_$shape/*.json $OUT/ab_$shape/*.err
done
