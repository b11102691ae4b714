#!/usr/bin/env bash
# Prepared in session 59 (not run). Decode A/Bs on the defaults of session 59's last crate commit
# (the splits of rounds of 33–64 rows folded in their clusters by waves):
# - the 48–64-row splits on two 32-row blocks (FLASHLANE_MATMUL_SPLIT32_WIDE=1: three blocks a
#   multiprocessor against two, where ncu found the 64-row split latency-bound; folded by the
#   same rule on those blocks' counts), the fold off (`=0`: Qwen3-4B at 48 and 56 with the
#   amended rule did not run in session 59), and the SwiGLU fold writing the down's split rows
#   (FLASHLANE_SWIGLU_SPLIT_IN_FOLD=1: no split_rows launch before the down), on Qwen3-4B at
#   48, 56, 64 and Qwen3-8B at 48, 64;
# - then, if there is room, rounds of up to 32 rows folded by the rule (`=waves`) against the
#   default (unfolded there) at 24 and 32 streams on both.
# ~500 s. Carry bench/peers/flashlane.xz (the default model moved out of the tree); limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
WIDE="default:FLASHLANE_AB=1 wide:FLASHLANE_MATMUL_SPLIT32_WIDE=1 nofold:FLASHLANE_MATMUL_CLUSTER_FOLD=0 swsplit:FLASHLANE_SWIGLU_SPLIT_IN_FOLD=1"
room 160 wide_4b && ab wide_4b qwen3-4b 48,56,64 "$WIDE" $FL
room 200 wide_8b && ab wide_8b qwen3-8b 48,64 "$WIDE" $FL
FOLD32="default:FLASHLANE_AB=1 waves:FLASHLANE_MATMUL_CLUSTER_FOLD=waves"
room 70 fold32_4b && ab fold32_4b qwen3-4b 24,32 "$FOLD32" $FL
room 90 fold32_8b && ab fold32_8b qwen3-8b 24,32 "$FOLD32" $FL
