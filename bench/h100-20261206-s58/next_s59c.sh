#!/usr/bin/env bash
# Prepared in session 58 (not run). The k split folded in its clusters, everywhere
# (FLASHLANE_MATMUL_CLUSTER_FOLD=1: Qwen3-4B 1.089× at 64 streams, Qwen3-8B 0.985–0.993× in
# session 58) and only where its clusters take no more waves than the unfolded blocks (`=waves`,
# from the driver's occupancy counts, which next_s59a.sh's matmul test prints), against the
# default, on Qwen3-4B and -8B at 48 and 64 streams (Qwen3-0.6B's matmuls do not split k).
# The matmul test ran the fold kernels on the H100 in session 58; `=waves` launches the same
# kernels on a subset of the calls. Then the 8-warp staged attention (the default since
# session 58 where a block holds 4 query heads) against FLASHLANE_ATTENTION_STAGED=0 on the
# prompts it now takes that session 58's A/B did not time: one and two prompts of 128 tokens
# (128 and 256 rows, under the few-warps kernel's 512) on Qwen3-4B. ~400 s. Carry bench/peers/flashlane.xz (and
# tiny_model.xz), the default model moved out of the tree; limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-560}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
FOLD="default:FLASHLANE_AB=1 fold:FLASHLANE_MATMUL_CLUSTER_FOLD=1 waves:FLASHLANE_MATMUL_CLUSTER_FOLD=waves"
room 130 fold_4b && ab fold_4b qwen3-4b 48,64 "$FOLD" $FL
room 170 fold_8b && ab fold_8b qwen3-8b 48,64 "$FOLD" $FL
room 60 staged_prompts && ab staged_prompts qwen3-4b 1,2 "default:FLASHLANE_AB=1 off:FLASHLANE_ATTENTION_STAGED=0" $FL
