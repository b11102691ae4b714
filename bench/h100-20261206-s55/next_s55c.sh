#!/usr/bin/env bash
# Session 55, call 4 (~200 s): attention's key loads at the default chosen from call 3's A/B (2
# for blocks of one head of at most 128 dims, 1 for the grouped kernels and heads of 256). The
# test that every ATT_KV_AHEAD gives the same bits in every attention kernel (it ran out of time
# in call 3 with 24 compiles; now 4), gpu_target's whole-model tests, and the A/B of the new
# default against 0 on Qwen3-0.6B. Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz},
# the default model moved out.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s55c 100 prep_in_attention
ab kv_06b_default qwen3-0.6b 1,8,64 "old:FLASHLANE_ATTENTION_KV_AHEAD=0 default:FLASHLANE_AB=1" $FL
TESTS="gpu_target" TEST_TIMEOUT=60 bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "gpu_target rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
