#!/usr/bin/env bash
# Prepared in session 60 (not run). Decode A/Bs of the switches whose kernels passed their tests on
# the H200 in session 60 but were never timed: the SwiGLU fold writing the down's split rows
# (FLASHLANE_SWIGLU_SPLIT_IN_FOLD=1: no split_rows launch before the down, 4–5 µs a layer at 64
# streams), the 48–64-row splits on two 32-row blocks (FLASHLANE_MATMUL_SPLIT32_WIDE=1), and the
# rounds of up to 32 rows folded by the rule (FLASHLANE_MATMUL_CLUSTER_FOLD=waves), against the
# defaults: Qwen3-4B at 32, 48, 64 streams, -8B at 48, 64. A setting faster at every count it takes
# becomes the default. ~330 s. Carry bench/peers/flashlane.xz (the default model moved out of the
# tree); limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
S="default:FLASHLANE_AB=1 swsplit:FLASHLANE_SWIGLU_SPLIT_IN_FOLD=1 wide:FLASHLANE_MATMUL_SPLIT32_WIDE=1 waves:FLASHLANE_MATMUL_CLUSTER_FOLD=waves"
room 200 ab_4b && ab ab_4b qwen3-4b 32,48,64 "$S" $FL
room 160 ab_8b && ab ab_8b qwen3-8b 48,64 "$S" $FL
