#!/usr/bin/env bash
# Session 32, call 3: the bf16 experts' L2 prefetches (FLASHLANE_MOE_PREFETCH, on by default).
# 1. A/B on the A3B slice at 1, 8 and 64 streams: prefetching against not (two rounds);
# 2. the MoE kernel tests and the whole-model GPU tests that run Qwen3-Next (gpu_target,
#    gpu_fixtures, gpu_conformance).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
SETTINGS="pf:FLASHLANE_AB=1 nopf:FLASHLANE_MOE_PREFETCH=0" STREAMS=1,8,64 ROUNDS=2 \
  bench/gpu_ab.sh /tmp/ab qwen3-next-a3b-slice $FL > /dev/null 2>&1
el "ab rc=$?"; cat /tmp/ab/ab.txt; cp /tmp/ab/ab.txt $OUT/ab_a3b.txt
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz
FLASHLANE_REQUIRE_GPU=1 timeout 120 $bin/backend_cuda --test-threads 1 moe > $OUT/moe_tests.log 2>&1
el "moe kernel tests rc=$?"; grep "^test \|test result\|panicked" $OUT/moe_tests.log | head -20
TESTS="gpu_target gpu_fixtures gpu_conformance" bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "tests rc=$?"; cat /tmp/tests/summary.txt
grep -h "FAILED\|panicked" /tmp/tests/*.log | head -20
cp /tmp/tests/summary.txt $OUT/tests_summary.txt
tar -C /tmp -cJf $OUT/tests_logs.tar.xz tests
el "total"
