#!/usr/bin/env bash
# Session 64, third call: the tensor-core attention on the other dense shapes, then the
# whole-model tests at the packs' commit.
set -u
. bench/device_ab.sh
gpu_info
S="default:FLASHLANE_AB=1 mma:FLASHLANE_ATTENTION_MMA=1"
room 80 ab_06b && ab ab_06b qwen3-0.6b 1,8,32,64 "$S" $FL
room 120 ab_8b && ab ab_8b qwen3-8b 1,8,32 "$S" $FL
room 200 tests && whole_model_tests
exit 0
