#!/usr/bin/env bash
# Session 73's first call. On an H200 (none since session 60): the five whole-model GPU test
# binaries at the packs' commit, then the kernel tests of the attention's shared softmax (its
# bit test, compiled beside the default on heads of 128, 16 and 256) and of every form of the
# walk. On an H100: session 72's next.sh (the bit test; Qwen3-4B at 64 streams, two rounds, the
# default against the shared softmax and against q/k/v walked in one warpgroup; the default's
# timeline; the matmul test), with the A3B slice at 64 streams against the tiles before the
# timeline (the default walk takes its wide blocks there too, never measured).
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz,flashlane.xz}; LIMIT as the budget allows.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
if grep -q H200 $OUT/gpu.txt; then
  room 200 whole_model_tests && whole_model_tests
  room 200 "kernel tests" && TEST_THREADS=3 kernel_tests kernels $(( LIMIT - $(date +%s) + T0 - 5 )) \
    prep_in_attention_gives_the_bits attention_of_narrow_heads_matches_backend_cpu \
    wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits
  exit 0
fi
room 250 "attention bit test" && TEST_THREADS=2 kernel_tests attention 240 \
  prep_in_attention_gives_the_bits attention_of_narrow_heads_matches_backend_cpu
if grep -q "test result: ok" $OUT/tests_attention.txt 2>/dev/null; then
  S="default:FLASHLANE_AB=1 shared:FLASHLANE_ATTENTION_SHARED_SOFTMAX=1 qkv:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_OUTS=192,FLASHLANE_MATMUL_WALK_NARROW=tiles"
else
  el "the attention's bit test did not pass: the shared softmax is left out of the A/B"
  S="default:FLASHLANE_AB=1 qkv:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_OUTS=192,FLASHLANE_MATMUL_WALK_NARROW=tiles"
fi
room 150 "A/B 4B" && ab n4b qwen3-4b 64 "$S" $FL
room 80 "A/B A3B" && ROUNDS=1 ab a3b qwen3-next-a3b-slice 64 "default:FLASHLANE_AB=1 tiles:FLASHLANE_MATMUL_WALK=0" $FL
room 45 timeline && timeline n4b qwen3-4b 64 "default:FLASHLANE_AB=1" $FL
room 100 "matmul kernel test" && kernel_tests matmul $(( LIMIT - $(date +%s) + T0 - 5 )) \
  wgmma_matmul_gives_the_other_kernels_bits
exit 0
