#!/usr/bin/env bash
# Session 60, call 1. 1. The kernel tests of the k split (the persistent split's cases, FLASHLANE_MATMUL_STREAM,
# beside the fold's and the wide split's; the SwiGLU fold into the down's split rows; the gate/up's SwiGLU
# through every kernel, persistent too). 2. The five whole-model GPU test binaries at the defaults
# (the 33–64-row splits folded in their clusters by waves; issue 12 asks them on the H200). 3. gpu_target
# and gpu_dense with every model's matmuls split (FLASHLANE_MATMUL_SPLIT_K=1) on the persistent split
# (x stationary; x through the ring, `=ring`), and with the SwiGLU split too. Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz}, the default model
# moved out of the tree; limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s60_kernels 240 matmul_matches_backend_cpu_gathers swiglu_split_in_fold gate_up_swiglu_gives_the_bits --nocapture &
kt=$!
PARALLEL=1 TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults" TEST_TIMEOUT=200 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
wait $kt
grep -E "clusters of|cluster fold on" $OUT/tests_s60_kernels.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
room 100 stream_tests || exit 0
SETTINGS="stream:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_STREAM=1 streamring:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_STREAM=ring streamsw:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_STREAM=1,FLASHLANE_SWIGLU_SPLIT_IN_FOLD=1" \
  PARALLEL=1 TESTS="gpu_target gpu_dense" TEST_TIMEOUT=90 bench/gpu_tests.sh /tmp/tw > /dev/null 2>&1
el "stream tests rc=$?"; tee $OUT/tests_summary_stream.txt < /tmp/tw/summary.txt
tar -C /tmp/tw -cJf $OUT/tests_logs_stream.tar.xz .
