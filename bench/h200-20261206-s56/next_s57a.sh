#!/usr/bin/env bash
# Prepared in session 56 (not run). The tests first, at the packs' commit: 1. every attention
# kernel test, among them the one that compiles every ATT_KV_AHEAD and compares all attention
# kernels' bits (cut by session 56's 160 s: a fresh machine compiles its PTX cold); 2. the MoE
# kernel tests (session 56 removed the one-row grouping and combine: `moe.cu` is `237f982`'s)
# and the tests of the tiles' L2 hint (`l2_hint`) and of the norm in the split of x
# (`norm_in_split`), both off by default; 3. gpu_target, whose default model
# is a MoE (its one-stream rounds take the restored grouping). ~540 s. Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the default model moved out of the
# tree; limit 600. The other four whole-model binaries: next_s57b.sh.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s57a_attention 290 attention prep_in_attention
kernel_tests s57a_moe 150 moe_ norm_twins l2_hint norm_in_split the_norm_goes_into
TESTS="gpu_target" TEST_TIMEOUT=90 bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "gpu_target rc=$?"; tee $OUT/tests_summary_a.txt < /tmp/tests/summary.txt
tar -C /tmp/tests -cJf $OUT/tests_logs_a.tar.xz .
