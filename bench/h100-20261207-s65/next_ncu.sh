#!/usr/bin/env bash
# Prepared in session 65 (not run): why the tensor-core attention's one-row launch takes ~11 µs
# against the per-head kernel's 4.6-7.2 on Qwen3-4B (session 65's timelines), now that the
# merge's loads and the barriers `16d5258` changed were not it. ncu of 12 launches of each at one
# stream (graphs off, no clock or cache control): time, DRAM and L2 throughput, warps active,
# issue, the pipes, and the stall reasons; then the same at 8 streams. Carry
# bench/peers/flashlane.xz (the default model moved out); limit ~300.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
ncu=$(ncu_bin)
dir=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $dir/
metrics=$(ncu_metrics smsp__inst_executed.sum,launch__cluster_dim_x)
# LABEL STREAMS SETTING(VAR=VALUE) KERNEL_REGEX
profile() {
  local label=$1 streams=$2 setting=$3 kernels=$4
  env $setting FLASHLANE_CUDA_GRAPHS=0 timeout 100 $ncu --clock-control none --cache-control none \
    --kernel-name regex:"$kernels" --launch-skip 100 --launch-count 12 --metrics $metrics --csv \
    $FL bench --device cuda --model $dir --load-format dummy --streams $streams \
    --prompt-tokens 128 --new-tokens 16 > $OUT/ncu_$label.csv 2> $OUT/ncu_$label.err
  el "ncu $label rc=$?"
  ncu_summary $OUT/ncu_$label.csv
}
room 70 simt1 && profile simt1 1 FLASHLANE_AB=1 'attention_gated_prep'
room 70 mma1 && profile mma1 1 FLASHLANE_ATTENTION_MMA=1 'attention_mma_cluster_prep'
room 70 simt8 && profile simt8 8 FLASHLANE_AB=1 'attention_gated_prep'
room 70 mma8 && profile mma8 8 FLASHLANE_ATTENTION_MMA=1 'attention_mma_cluster_prep'
exit 0
