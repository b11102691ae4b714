#!/usr/bin/env bash
# Prepared in session 57 (not run). The k splits on mma.sync folded in their clusters
# (`matmul_bf16_tiled_split_fold`, `_split32_fold`, their `_fold_swiglu`;
# FLASHLANE_MATMUL_CLUSTER_FOLD=1, off): 1. the matmul and SwiGLU kernel tests that run them
# against the other kernels (rounds of 40, 64 and 300 rows, the 32-row blocks at 20 and 32;
# SwiGLU widths with a partial last tile); 2. the decode A/B on Qwen3-4B at 32 / 48 / 64
# streams (32 takes the 32-row blocks; also with the staged attention,
# FLASHLANE_ATTENTION_STAGED=1) and -8B at 64; 3. gpu_dense and gpu_target with it on (alone =
# batched = moved = with drafts). ~500 s. Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the model moved out; limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s58c_fold 200 matmul_matches_backend_cpu_gathers gate_up_swiglu_gives
FOLD="default:FLASHLANE_AB=1 fold:FLASHLANE_MATMUL_CLUSTER_FOLD=1"
room 140 fold_4b && ab fold_4b qwen3-4b 32,48,64 "$FOLD both:FLASHLANE_MATMUL_CLUSTER_FOLD=1,FLASHLANE_ATTENTION_STAGED=1" $FL
room 90 fold_8b && ab fold_8b qwen3-8b 64 "$FOLD" $FL
if room 100 whole_model_fold; then
  SETTINGS="fold:FLASHLANE_MATMUL_CLUSTER_FOLD=1" TESTS="gpu_dense gpu_target" TEST_TIMEOUT=60 \
    bench/gpu_tests.sh /tmp/tests_fold > /dev/null 2>&1
  el "whole-model tests, cluster fold rc=$?"; tee $OUT/tests_summary_fold.txt < /tmp/tests_fold/summary.txt
  tar -C /tmp/tests_fold -cJf $OUT/tests_logs_fold.tar.xz .
fi
