#!/usr/bin/env bash
# Prepared in session 55 (not run; its call 4 found no device time left). The tests first:
# 1. the attention kernel tests, among them the one that compiles ATT_KV_AHEAD 0 (and 1 where
# heads are at most 128 dims) and compares every attention kernel's bits with the default's (2 in
# the per-head kernels with heads of at most 128 dims, 1 elsewhere; it ran out of its 200 s in
# session 55 with 24 compiles; now 7); 2. the MoE and norm-twin kernel tests: session 55 removed
# the experts' sum in `moe_down` and the routing in the front projection (`moe_down`'s arguments
# changed, `moe_route`'s PTX reordered) and added one row's direct grouping and combine
# (`one_row_grouping_writes_what_group_pairs_writes`, a row alone with the fused norm in the MoE
# test); 3. the five whole-model GPU test binaries (alone = batched = moved = with drafts, bit for
# bit) at these defaults. Session 56 added the test of the tiles' L2 hint (`l2_hint`, off by
# default) to the second. ~430 s. Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,
# tiny_model.xz}, the default model moved out of the tree. The A/Bs: next_s56c.sh.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s56a_attention 160 attention prep_in_attention
kernel_tests s56a_moe 180 moe_ norm_twins one_row_grouping l2_hint
TESTS="gpu_target gpu_conformance gpu_dense gpu_fixtures gpu_faults" TEST_TIMEOUT=120 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
