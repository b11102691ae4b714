#!/usr/bin/env bash
# Prepared in session 58 (not run; replaces session 57's next_s58d.sh, adding the warpgroup split).
# What holds the 64-row k split of a 64-stream Qwen3-4B round (60 % of it on the H200 at
# ~1.2–1.7 TB/s): ncu on its launches (dummy weights, graphs off) as the default runs them
# (`matmul_bf16_tiled_split`, mma.sync), folded in clusters (FLASHLANE_MATMUL_CLUSTER_FOLD=1)
# and on the swapped warpgroup split (FLASHLANE_MATMUL_WG_SPLIT=1: `matmul_bf16_wg_split_n64`,
# weights from global memory straight into registers two chunks ahead; 9 % slower than the
# tiles at 64 streams in session 44): DRAM and L2 throughput, the tensor pipe and shared-memory
# pipe, the warps' stall reasons — whether latency (few chunks in flight), the tensor pipe or
# shared memory bounds each, which decides between a deeper ring of weights for the warpgroup
# split (TMA into shared memory) and a faster mma.sync tile. ~250 s. Carry
# bench/peers/flashlane.xz (the model need not move); limit 300.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
dir=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $dir/
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__pipe_tensor_op_hmma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,sm__inst_executed_pipe_tensor_op_hmma.avg.pct_of_peak_sustained_active
metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
for s in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait lg_throttle; do
  metrics+=,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
# LABEL SETTING KERNEL_REGEX NCU_ARGS…
profile() {
  local label=$1 setting=$2 regex=$3; shift 3
  env ${setting} FLASHLANE_CUDA_GRAPHS=0 timeout 120 $ncu --clock-control none --cache-control none \
    --kernel-name regex:"$regex" --launch-skip 600 --launch-count 12 "$@" --csv \
    $FL bench --device cuda --model $dir --load-format dummy --streams 64 \
    --prompt-tokens 128 --new-tokens 16 > $OUT/ncu_split_$label.csv 2> $OUT/ncu_split_$label.err
  el "ncu $label rc=$?"
  ncu_summary $OUT/ncu_split_$label.csv
}
room 80 ncu_default && profile default FLASHLANE_AB=1 'matmul_bf16_tiled_split' --metrics $metrics
room 80 ncu_fold && profile fold FLASHLANE_MATMUL_CLUSTER_FOLD=1 'matmul_bf16_tiled_split' --metrics $metrics
# The warpgroup's MMA is not the hmma pipe: its whole sections instead (names ncu keeps stable).
room 80 ncu_wg && profile wg FLASHLANE_MATMUL_WG_SPLIT=1 'matmul_bf16_wg_split' --page details \
  --section SpeedOfLight --section Occupancy --section WarpStateStats --section ComputeWorkloadAnalysis \
  --section MemoryWorkloadAnalysis
