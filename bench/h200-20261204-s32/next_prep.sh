#!/usr/bin/env bash
# Ready for the next device session (not run yet). Here first: move
# models/flashlane-tiny/model.safetensors out of the tree, `bench/pack_gpu_tests.sh
# --flashlane`, carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}. Three switches,
# all off by default, written in session 32 and never run on a GPU:
# - FLASHLANE_ATTENTION_PREP_FUSED=1: the prep in the attention (attention_gated_prep);
# - FLASHLANE_NORM_FEW_WARPS=1: every rmsnorm_rows by 8 warps a row (rmsnorm_rows_few);
# - FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=8: decode rounds' attention grouped by KV head.
# 1. their kernel tests and the attention and norm tests beside them;
# 2. the whole-model GPU tests with the fused prep on, gpu_target with the few-warp norms;
# 3. A/B on Qwen3-0.6B (1, 8, 64 streams: as built, fused prep, few-warp norms) and the A3B slice
#    (1, 8: as built, fused prep);
# 4. A/B on Qwen3-4B at 8, 32 and 64 streams: a block a head against KV-head groups.
# Unlike the session's four dropped experiments none puts work in front of a kernel's loads but
# the q each attention warp waited for before too.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz
FLASHLANE_REQUIRE_GPU=1 timeout 120 $bin/backend_cuda --test-threads 1 attention prep rmsnorm > $OUT/kernel_tests.log 2>&1
el "kernel tests rc=$?"; grep "^test \|test result\|panicked" $OUT/kernel_tests.log | head -14
SETTINGS="fused:FLASHLANE_ATTENTION_PREP_FUSED=1" TESTS="gpu_target gpu_dense gpu_conformance" \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt; cp /tmp/tests/summary.txt $OUT/tests_summary.txt
FLASHLANE_NORM_FEW_WARPS=1 FLASHLANE_REQUIRE_GPU=1 timeout 60 $bin/gpu_target --test-threads 1 > $OUT/gpu_target_fewnorm.log 2>&1
el "gpu_target few-warp norms rc=$?"; grep "test result\|panicked" $OUT/gpu_target_fewnorm.log | head -4
SETTINGS="base:FLASHLANE_AB=1 fused:FLASHLANE_ATTENTION_PREP_FUSED=1 fewnorm:FLASHLANE_NORM_FEW_WARPS=1" \
  STREAMS=1,8,64 ROUNDS=2 bench/gpu_ab.sh /tmp/ab_06 qwen3-0.6b $FL > /dev/null 2>&1
el "ab 0.6b rc=$?"; cat /tmp/ab_06/ab.txt; cp /tmp/ab_06/ab.txt $OUT/ab_qwen3-0.6b.txt
SETTINGS="base:FLASHLANE_AB=1 fused:FLASHLANE_ATTENTION_PREP_FUSED=1" STREAMS=1,8 ROUNDS=2 \
  bench/gpu_ab.sh /tmp/ab_a3b qwen3-next-a3b-slice $FL > /dev/null 2>&1
el "ab a3b rc=$?"; cat /tmp/ab_a3b/ab.txt; cp /tmp/ab_a3b/ab.txt $OUT/ab_a3b.txt
SETTINGS="perhead:FLASHLANE_AB=1 grouped:FLASHLANE_ATTENTION_GROUPED_MIN_ROWS=8" STREAMS=8,32,64 ROUNDS=2 \
  bench/gpu_ab.sh /tmp/ab_grouped qwen3-4b $FL > /dev/null 2>&1
el "ab grouped rc=$?"; cat /tmp/ab_grouped/ab.txt; cp /tmp/ab_grouped/ab.txt $OUT/ab_grouped_4b.txt
