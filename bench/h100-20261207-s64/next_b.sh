#!/usr/bin/env bash
# Session 64, second call: where the tensor-core attention loses (1 and 8 streams, Qwen3-4B:
# 0.958x / 0.934x in the first call) seen in timelines, its prep twin's test, then =waves.
set -u
. bench/device_ab.sh
gpu_info
TL="tl:FLASHLANE_TIMELINE=1 tlmma:FLASHLANE_TIMELINE=1,FLASHLANE_ATTENTION_MMA=1"
room 60 timeline1 && timeline 1 qwen3-4b 1 "$TL" $FL
room 60 timeline8 && timeline 8 qwen3-4b 8 "$TL" $FL
room 200 prep_test && kernel_tests mma_prep 200 prep_in_attention_gives
W="default:FLASHLANE_AB=1 waves:FLASHLANE_MATMUL_CLUSTER_FOLD=waves"
room 100 ab_waves_8b && ab ab_waves_8b qwen3-8b 24,32 "$W" $FL
room 100 ab_waves_06b && ab ab_waves_06b qwen3-0.6b 24,32 "$W" $FL
exit 0
