#!/usr/bin/env bash
# Ready for the next device session (not run yet): the prep in the attention
# (FLASHLANE_ATTENTION_PREP_FUSED=1, attention_gated_prep; off by default). Here first: move
# models/flashlane-tiny/model.safetensors out of the tree, `bench/pack_gpu_tests.sh
# --flashlane`, carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
# 1. its kernel test and the attention tests beside it;
# 2. the whole-model GPU tests with it on (alone = batched = moved = with drafts);
# 3. A/B, apart against fused, on Qwen3-0.6B and the A3B slice at 1 and 8 streams;
# 4. A/B of a decode round's attention by KV-head groups (FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=8)
#    against a block a head, on Qwen3-4B at 8, 32 and 64 streams.
# Unlike the session's four dropped experiments it puts nothing in front of a kernel's loads
# but the q prep each warp needs before its first key anyway (q came from memory before too).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 120 $bin/backend_cuda --test-threads 1 attention prep > $OUT/kernel_tests.log 2>&1
el "kernel tests rc=$?"; grep "^test \|test result\|panicked" $OUT/kernel_tests.log | head -12
SETTINGS="fused:FLASHLANE_ATTENTION_PREP_FUSED=1" TESTS="gpu_target gpu_dense gpu_conformance" \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt; cp /tmp/tests/summary.txt $OUT/tests_summary.txt
for shape in qwen3-0.6b qwen3-next-a3b-slice; do
  SETTINGS="apart:FLASHLANE_AB=1 fused:FLASHLANE_ATTENTION_PREP_FUSED=1" STREAMS=1,8 ROUNDS=2 \
    bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "ab $shape rc=$?"; cat /tmp/ab_$shape/ab.txt; cp /tmp/ab_$shape/ab.txt $OUT/ab_$shape.txt
done
SETTINGS="perhead:FLASHLANE_AB=1 grouped:FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=8" STREAMS=8,32,64 ROUNDS=2 \
  bench/gpu_ab.sh /tmp/ab_grouped qwen3-4b $FL > /dev/null 2>&1
el "ab grouped rc=$?"; cat /tmp/ab_grouped/ab.txt; cp /tmp/ab_grouped/ab.txt $OUT/ab_grouped_4b.txt
