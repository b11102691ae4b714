#!/usr/bin/env bash
# Session 29, call 5: the binary with `kernels::round_launches` (serial launches in Qwen3-0.6B's
# decode rounds of 16-64 rows, from calls 3 and 4) against the same binary with every round
# overlapped as before (FLASHLANE_PDL=1), interleaved, then the dense and model GPU tests.
# Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz}, the default model moved out.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
ROUNDS=${ROUNDS:-2} STREAMS=1,8,16,32,64 SETTINGS="rule:FLASHLANE_AB=1 always:FLASHLANE_PDL=1" \
    bench/gpu_ab.sh /tmp/ab3 qwen3-0.6b "$FL" > /dev/null 2>&1
el "ab"; cat /tmp/ab3/ab.txt
TESTS="gpu_dense gpu_fixtures gpu_target gpu_conformance" bench/gpu_tests.sh /tmp/gpu_tests > /tmp/gpu_tests.log 2>&1
el "tests"; cat /tmp/gpu_tests/summary.txt
tar -C /tmp -cJf $OUT/ab3_tests.tar.xz ab3 gpu_tests gpu_tests.log
