#!/usr/bin/env bash
# Session 59. The cluster fold's `=waves` rule as amended after this session's kernel
# timelines (a gate/up's split with its SwiGLU folds whatever its waves; the rest fold where
# their clusters take no more waves than the unfolded blocks) against the default, on Qwen3-8B
# at 48, 56, 64 streams and Qwen3-4B at 48, 56 (at 64 it folds what `=1` folds there, measured
# 1.093× in next_s59c). ~210 s. Carry bench/peers/flashlane.xz (and tiny_model.xz), the
# default model moved out of the tree.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-230}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
FOLD="default:FLASHLANE_AB=1 waves:FLASHLANE_MATMUL_CLUSTER_FOLD=waves"
room 110 waves_8b && ab waves_8b qwen3-8b 48,56,64 "$FOLD" $FL
room 60 waves_4b && ab waves_4b qwen3-4b 48,56 "$FOLD" $FL
