#!/usr/bin/env bash
# Session 72's last call: Qwen3-4B at 64 streams, the new default (the walk's wide gate/up)
# against the tiles (FLASHLANE_MATMUL_WALK=0) and against the attention's shared softmax
# (FLASHLANE_ATTENTION_SHARED_SOFTMAX=1), one round; then the attention's bit test (the shared
# softmax compiled beside the default on two head shapes) as far as the limit lets it run.
# Carry gpu-tests.tar.xz, tiny_model.xz, flashlane.xz; LIMIT as the budget allows.
set -u
T0=$(date +%s)
. bench/device_ab.sh
S="default:FLASHLANE_AB=1 tiles:FLASHLANE_MATMUL_WALK=0 shared:FLASHLANE_ATTENTION_SHARED_SOFTMAX=1"
room 60 "A/B 4B" && ROUNDS=1 ab s4b qwen3-4b 64 "$S" $FL
room 40 "attention bit test" && kernel_tests attention $(( LIMIT - $(date +%s) + T0 - 5 )) \
  prep_in_attention_gives_the_bits
exit 0
