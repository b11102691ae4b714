#!/usr/bin/env bash
# Session 64's short call (few device-seconds left): the tensor-core attention's kernel tests at
# `16d5258` (the merge's loads at once, the prep twin without the cluster barrier), then its A/B
# at 1 and 8 streams on Qwen3-4B, where it lost (0.958× / 0.934× at `8251b73`), then 32 and 64.
set -u
. bench/device_ab.sh
gpu_info
TEST_THREADS=4 kernel_tests mma 170 attention_of prep_in_attention_gives
if grep -q "test result: ok. 4 passed" $OUT/tests_mma.txt; then
  S="default:FLASHLANE_AB=1 mma:FLASHLANE_ATTENTION_MMA=1"
  room 50 ab_4b && ab ab_4b qwen3-4b 1,8 "$S" $FL
  room 50 ab_4b_many && ab ab_4b_many qwen3-4b 32,64 "$S" $FL
  room 40 ab_06b && ab ab_06b qwen3-0.6b 1,8 "$S" $FL
fi
exit 0
