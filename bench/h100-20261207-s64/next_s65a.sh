#!/usr/bin/env bash
# Prepared in session 64 for the next session's first call (not run). Carry
# bench/peers/{gpu-tests.tar.xz,tiny_model.xz,flashlane.xz} (`bash bench/pack_gpu_tests.sh
# --flashlane` at the commit to run), the default model moved out of the tree (and old bench
# folders if the tool refuses the size); limit 600.
# 1. The tensor-core attention's kernel tests at `cbea1d1` and later: `attention_of_*` (now also
#    `attention_mma_rows` against `attention_mma`, one session and two side by side) and the
#    prep twin (restructured in `16d5258`: no cluster barrier after the prep); later the matmul
#    test that runs the cluster fold (its waves rule for rounds of 17–32 rows the default,
#    `78da2cd`).
# 2. If they pass: the tensor-core attention against the default at 1, 8, 32, 64 streams on
#    Qwen3-4B and 1, 8 on -0.6B (it lost 4–12 % at 1–8 streams at `8251b73`; `16d5258` cut its
#    one-row launch's fixed cost); its timelines at 1 and 8 streams.
# 3. `attention_mma_rows` (FLASHLANE_ATTENTION_MMA_ROWS=1) against `attention_mma` on prompts:
#    64 × 128 tokens on Qwen3-0.6B and -4B (the `pre` column), one 2,048-token prompt on -4B.
# 4. The whole-model tests under both switches; on an H200 the five at the defaults first.
set -u
. bench/device_ab.sh
gpu_info
h200=0; grep -q H200 $OUT/gpu.txt && h200=1
[ $h200 = 1 ] && room 200 tests && whole_model_tests
TEST_THREADS=4 kernel_tests mma 200 attention_of prep_in_attention_gives
if grep -q "test result: ok. 4 passed" $OUT/tests_mma.txt; then
  S="default:FLASHLANE_AB=1 mma:FLASHLANE_ATTENTION_MMA=1"
  room 90 ab_4b && ab ab_4b qwen3-4b 1,8,32,64 "$S" $FL
  room 50 ab_06b && ab ab_06b qwen3-0.6b 1,8 "$S" $FL
  R="mma:FLASHLANE_ATTENTION_MMA=1 rows:FLASHLANE_ATTENTION_MMA=1,FLASHLANE_ATTENTION_MMA_ROWS=1"
  room 60 ab_rows_06b && ab ab_rows_06b qwen3-0.6b 64 "$R" $FL
  room 60 ab_rows_4b && ab ab_rows_4b qwen3-4b 64 "$R" $FL
  room 40 ab_rows_long && PROMPT_TOKENS=2048 ab ab_rows_long qwen3-4b 1 "$R" $FL
  TL="tl:FLASHLANE_TIMELINE=1 tlmma:FLASHLANE_TIMELINE=1,FLASHLANE_ATTENTION_MMA=1"
  room 50 timeline1 && timeline 1 qwen3-4b 1 "$TL" $FL
  room 50 timeline8 && timeline 8 qwen3-4b 8 "$TL" $FL
  if room 150 tests_mma; then
    SETTINGS="mma:FLASHLANE_ATTENTION_MMA=1,FLASHLANE_ATTENTION_MMA_ROWS=1" PARALLEL=1 \
      TESTS="gpu_target gpu_conformance gpu_fixtures" TEST_TIMEOUT=140 bench/gpu_tests.sh /tmp/tests_mma > /dev/null 2>&1
    el "whole-model tests under both switches rc=$?"; tee $OUT/tests_summary_mma.txt < /tmp/tests_mma/summary.txt
  fi
fi
# The matmul test that runs the cluster fold (its own call's worth where the rest left no room).
room 150 fold_test && kernel_tests fold 140 matmul_matches_backend_cpu
[ $h200 = 0 ] && room 200 tests && whole_model_tests
exit 0
