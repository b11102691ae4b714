#!/usr/bin/env bash
# Session 55, call 3: attention's key loads (ATT_KV_AHEAD, kernels/mod.rs). Session 55's kernel
# timeline (timeline.txt here) had Qwen3-0.6B's one-row attention (`attention_gated_prep`) at
# 9-15 us a layer, 25-40 % of a one-stream round, and its SASS waited on five loads a group of
# 4 keys one after another (the K loads together, each V behind the branch that ends a group past
# the row's position). 1. The attention kernel tests (every ATT_KV_AHEAD in every attention
# kernel: the same bits; against backend-cpu). 2. The A/B of 0 (the old loads), 1 (a group's K and
# V issued together) and 2 (also the next group's ahead; heads of 256 take 1) on Qwen3-0.6B, the
# A3B slice and Qwen3-4B. 3. gpu_target's whole-model tests at the new default.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the default model moved out.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s55b 200 attention prep_in_attention
AH="old:FLASHLANE_ATTENTION_KV_AHEAD=0 group:FLASHLANE_ATTENTION_KV_AHEAD=1 next:FLASHLANE_ATTENTION_KV_AHEAD=2"
ab kv_06b qwen3-0.6b 1,8,64 "$AH" $FL
ab kv_a3b qwen3-next-a3b-slice 1,8 "$AH" $FL
ab kv_4b qwen3-4b 1,8,64 "$AH" $FL
TESTS="gpu_target" TEST_TIMEOUT=100 bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "gpu_target rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
