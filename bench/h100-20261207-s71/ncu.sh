#!/usr/bin/env bash
# ncu of the walk's kernels in a 64-stream Qwen3-4B decode round (after session 71's A/B: the
# TMA walk slower than the tiles, its 32-row o and down ~0.8 TB/s, in k groups slower still):
# the TMA walk at its default depth, then in k groups. Carry bench/peers/flashlane.xz (and the
# tests' packs if at hand); LIMIT as the budget allows.
set -u
T0=$(date +%s)
. bench/device_ab.sh
ncu=$(ncu_bin)
dir=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $dir/
metrics=$(ncu_metrics l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,launch__occupancy_limit_shared_mem,launch__cluster_max_active_clusters,sm__cycles_active.avg.pct_of_peak_sustained_elapsed)
profile() {
  local label=$1 setting=$2 kernels=$3
  env $setting FLASHLANE_CUDA_GRAPHS=0 timeout ${NCU_TIMEOUT:-90} $ncu --clock-control none --cache-control none \
    --kernel-name regex:"$kernels" --launch-skip 216 --launch-count 6 --metrics $metrics --csv \
    $FL bench --device cuda --model $dir --load-format dummy --streams 64 \
    --prompt-tokens 128 --new-tokens 8 > $OUT/ncu_$label.csv 2> $OUT/ncu_$label.err
  el "ncu $label rc=$?"
  ncu_summary $OUT/ncu_$label.csv | tee $OUT/ncu_$label.txt
}
room 95 ncu_tma && profile tma FLASHLANE_MATMUL_WALK=tma 'matmul_bf16_walk'
room 95 ncu_tmak && profile tmak "FLASHLANE_MATMUL_WALK=tma FLASHLANE_MATMUL_WALK_K_GROUPS=auto" 'matmul_bf16_walk'
exit 0
