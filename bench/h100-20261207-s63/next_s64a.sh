#!/usr/bin/env bash
# Prepared in session 63 for the next session's first call (not run):
# 1. The tensor-core attention (`attention_mma` and `attention_mma_cluster`,
#    FLASHLANE_ATTENTION_MMA=1, the commit that adds this script) on its first GPU: its kernel
#    tests (`attention_of_*`: against backend-cpu's reference at 1e-4, the two kernels' bits
#    alike, a row alone against the batch, beside the other kernels' bits;
#    later `prep_in_attention_gives_*`: the cluster kernel's prep twin against the prep apart).
# 2. If they pass, its A/B against the default on Qwen3-4B at 1, 8, 32, 64 streams and Qwen3-8B
#    at 64 (prompt 128, 64 new tokens), then one stream after a 2,048-token prompt (the cluster
#    twin's 16 splits against the per-head kernel's 16 warps a head).
#    Then gpu_target, gpu_conformance and gpu_fixtures under the switch.
# 3. As far as the limit lets it: `=waves` (rounds of up to 32 rows folded by the rule) on
#    Qwen3-8B and -0.6B at 24 and 32 streams.
# 4. On an H200: the five whole-model GPU test binaries first (issue 12 asks them there at the
#    current commit; they passed on an H100 in session 63 at 9303369's kernels).
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz,flashlane.xz} (bench/pack_gpu_tests.sh
# --flashlane at the commit run), the default model moved out of the tree and old bench folders
# too if the tool refuses the size; limit 600.
set -u
. bench/device_ab.sh
gpu_info
h200=0; grep -q H200 $OUT/gpu.txt && h200=1
[ $h200 = 1 ] && room 200 tests && whole_model_tests
# Each test compiles the module once a shape (~20 s on a fresh machine): attention_of_* 8 times.
kernel_tests mma 240 attention_of
if grep -q "test result: ok" $OUT/tests_mma.txt; then
  S="default:FLASHLANE_AB=1 mma:FLASHLANE_ATTENTION_MMA=1"
  room 150 ab_4b && ab ab_4b qwen3-4b 1,8,32,64 "$S" $FL
  room 60 ab_8b && ab ab_8b qwen3-8b 64 "$S" $FL
  room 60 ab_long && PROMPT_TOKENS=2048 ab ab_long qwen3-4b 1 "$S" $FL
  # Where the attention's time goes in a 64-stream round with and without the switch.
  TL="tl:FLASHLANE_TIMELINE=1 tlmma:FLASHLANE_TIMELINE=1,FLASHLANE_ATTENTION_MMA=1"
  room 70 timeline && timeline 64 qwen3-4b 64 "$TL" $FL
  # The prep twin (its test compiles ~9 modules), then the engine's own checks under the switch: alone = batched = moved = with drafts, bit for bit
  # (gpu_target, gpu_conformance; their logits against transformers by tolerance).
  room 200 prep_test && kernel_tests mma_prep 200 prep_in_attention_gives
  if room 150 tests_mma; then
    SETTINGS="mma:FLASHLANE_ATTENTION_MMA=1" PARALLEL=1 TESTS="gpu_target gpu_conformance gpu_fixtures" \
      TEST_TIMEOUT=140 bench/gpu_tests.sh /tmp/tests_mma > /dev/null 2>&1
    el "whole-model tests under the switch rc=$?"; tee $OUT/tests_summary_mma.txt < /tmp/tests_mma/summary.txt
  fi
fi
# Session 63's one gain: rounds of up to 32 rows folded by the waves rule, +2.0 % at 32 streams
# on Qwen3-4B (H100); the other shapes before it may become the default.
W="default:FLASHLANE_AB=1 waves:FLASHLANE_MATMUL_CLUSTER_FOLD=waves"
room 100 ab_waves_8b && ab ab_waves_8b qwen3-8b 24,32 "$W" $FL
room 100 ab_waves_06b && ab ab_waves_06b qwen3-0.6b 24,32 "$W" $FL
[ $h200 = 0 ] && room 200 tests && whole_model_tests
exit 0
