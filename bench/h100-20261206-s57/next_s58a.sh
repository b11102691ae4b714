#!/usr/bin/env bash
# Prepared in session 57 (not run). The staged attention (`attention_grouped_staged` and
# `_staged8`, FLASHLANE_ATTENTION_STAGED=1|8, off; `e9c1915`): 1. its kernel tests against the
# per-head kernel (`attention_of_*`: many, narrow and wide heads, bf16 and f32 caches, rows
# spanning three rounds of keys and a prompt's first rows); 2. the decode A/B on Qwen3-4B and
# Qwen3-0.6B at 32 and 64 streams, Qwen3-8B at 64, against the default (the grouped kernel);
# 3. gpu_target and gpu_dense with each staged kernel forced (alone = batched = moved = with
# drafts, bit for bit, with it taking every grouped call). ~540 s. Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the default model moved out of the
# tree; limit 600. A staged kernel that wins at every count it takes becomes the default.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-560}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s58a_attention 170 attention_of_
# `staged` takes the prep in the attention too (`attention_grouped_staged_prep`, decode rounds
# without drafts); `staged_apart` keeps it a launch of its own.
STAGED="default:FLASHLANE_AB=1 staged:FLASHLANE_ATTENTION_STAGED=1 staged_apart:FLASHLANE_ATTENTION_STAGED=1,FLASHLANE_PREP_IN_ATTENTION=0 staged8:FLASHLANE_ATTENTION_STAGED=8"
room 130 staged_4b && ab staged_4b qwen3-4b 32,64 "$STAGED" $FL
room 90 staged_06b && ab staged_06b qwen3-0.6b 32,64 "$STAGED" $FL
room 120 staged_8b && ab staged_8b qwen3-8b 64 "$STAGED" $FL
if room 110 whole_model_staged; then
  SETTINGS="staged:FLASHLANE_ATTENTION_STAGED=1 staged8:FLASHLANE_ATTENTION_STAGED=8" \
    TESTS="gpu_target gpu_dense" TEST_TIMEOUT=60 bench/gpu_tests.sh /tmp/tests_staged > /dev/null 2>&1
  el "whole-model tests, staged forced rc=$?"; tee $OUT/tests_summary_staged.txt < /tmp/tests_staged/summary.txt
  tar -C /tmp/tests_staged -cJf $OUT/tests_logs_staged.tar.xz .
fi
