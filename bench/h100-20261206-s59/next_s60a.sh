#!/usr/bin/env bash
# Prepared in session 59 (not run). 1. The matmul kernel test: the fold's cluster counts, and the
# k split of 33–64 rows on two 32-row blocks (FLASHLANE_MATMUL_SPLIT32_WIDE), folded and not;
# the SwiGLU fold writing the down's split rows (FLASHLANE_SWIGLU_SPLIT_IN_FOLD) against the down
# from act.
# 2. The five whole-model GPU test binaries at the defaults of session 59's last crate commit
# (the splits of 33–64-row rounds folded in their clusters by waves; issue 12 asks them on the
# H200: if one comes, this is that run). 3. gpu_target and gpu_dense with the 48–64-row splits on 32-row blocks (folded by the
# rule), again with rounds of up to 32 rows folded too (`=waves`), and with the SwiGLU fold
# writing the down's split rows. ~300–480 s (the binaries side by side). Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the default model moved out of the
# tree; limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
# The kernel tests and the five whole-model binaries side by side (PARALLEL=1: a fresh machine's
# minute a binary is mostly compiling, one core a module; a binary that fails so runs again
# alone).
kernel_tests s60a_matmul 200 matmul_matches_backend_cpu_gathers swiglu_split_in_fold --nocapture &
kt=$!
PARALLEL=1 TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults" TEST_TIMEOUT=200 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
wait $kt
grep -E "clusters of" $OUT/tests_s60a_matmul.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
room 100 wide_tests || exit 0
SETTINGS="wide:FLASHLANE_MATMUL_SPLIT32_WIDE=1 widefold:FLASHLANE_MATMUL_SPLIT32_WIDE=1,FLASHLANE_MATMUL_CLUSTER_FOLD=waves swsplit:FLASHLANE_SWIGLU_SPLIT_IN_FOLD=1,FLASHLANE_MATMUL_CLUSTER_FOLD=waves" \
  PARALLEL=1 TESTS="gpu_target gpu_dense" TEST_TIMEOUT=90 bench/gpu_tests.sh /tmp/tw > /dev/null 2>&1
el "wide tests rc=$?"; tee $OUT/tests_summary_wide.txt < /tmp/tw/summary.txt
tar -C /tmp/tw -cJf $OUT/tests_logs_wide.tar.xz .
