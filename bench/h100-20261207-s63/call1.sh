#!/usr/bin/env bash
# Session 63's last device seconds: the tensor-core attention (`attention_mma`,
# FLASHLANE_ATTENTION_MMA=1) on its first GPU: its kernel tests (against backend-cpu's reference,
# and a row alone against the batch), then as far as the limit lets it the A/B against the
# default on Qwen3-4B at 64 streams (and 32). Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz}
# with the default model moved out of the tree (neither step reads its weights).
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-150}
. bench/device_ab.sh
. bench/unpack_peers.sh
kernel_tests mma 50 attention_of
if grep -q "test result: ok" $OUT/tests_mma.txt; then
  room 60 ab_mma && ab ab_mma qwen3-4b 64 "default:FLASHLANE_AB=1 mma:FLASHLANE_ATTENTION_MMA=1" $FL
  room 45 ab_mma32 && ab ab_mma32 qwen3-4b 32 "default:FLASHLANE_AB=1 mma:FLASHLANE_ATTENTION_MMA=1" $FL
fi
exit 0
