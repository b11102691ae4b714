#!/usr/bin/env bash
# The next session's first call (bench/h100-20261207-s72/NEXT.md, items 1–3): the attention's
# shared softmax's bit test (compiled beside the default on heads of 128, 16 and 256); where it
# passes, Qwen3-4B at 64 streams, two rounds: the default against the shared softmax and against
# q/k/v walked in one warpgroup beside the default's wide gate/up; the default's 64-row kernel
# timeline; then the matmul kernel test (its new case: the default walk, wide blocks only), as
# far as LIMIT allows.
# Carry gpu-tests.tar.xz, tiny_model.xz, flashlane.xz; LIMIT as the budget allows (≥ 560 for all).
set -u
T0=$(date +%s)
. bench/device_ab.sh
room 250 "attention bit test" && TEST_THREADS=2 kernel_tests attention 240 \
  prep_in_attention_gives_the_bits attention_of_narrow_heads_matches_backend_cpu
if grep -q "test result: ok" $OUT/tests_attention.txt 2>/dev/null; then
  S="default:FLASHLANE_AB=1 shared:FLASHLANE_ATTENTION_SHARED_SOFTMAX=1 qkv:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_OUTS=192,FLASHLANE_MATMUL_WALK_NARROW=tiles"
else
  el "the attention's bit test did not pass: the shared softmax is left out of the A/B"
  S="default:FLASHLANE_AB=1 qkv:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_OUTS=192,FLASHLANE_MATMUL_WALK_NARROW=tiles"
fi
room 150 "A/B 4B" && ab n4b qwen3-4b 64 "$S" $FL
room 45 timeline && timeline n4b qwen3-4b 64 "default:FLASHLANE_AB=1" $FL
room 100 "matmul kernel test" && kernel_tests matmul $(( LIMIT - $(date +%s) + T0 - 5 )) \
  wgmma_matmul_gives_the_other_kernels_bits
exit 0
