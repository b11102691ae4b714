#!/usr/bin/env bash
# ncu of a 64-stream Qwen3-4B decode round's matmuls (session 71's ncu.sh, widened): what bounds
# the walk's blocks (L2 and shared-memory throughput, the tensor pipe, the consumers' stalls),
# at the default (the tiles' q/k/v, o and down; the wide walk's gate/up), under `=tma` (q/k/v
# in 64-row blocks, o and down in 32-row ones), in k groups, and x's splits at the default.
# Carry bench/peers/flashlane.xz; LIMIT as the budget allows. ONLY=split runs only the last.
set -u
T0=$(date +%s)
. bench/device_ab.sh
ncu=$(ncu_bin)
dir=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $dir/
extra=lts__t_bytes.sum,dram__bytes_read.sum,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum
extra+=,sm__memory_throughput.avg.pct_of_peak_sustained_elapsed,l1tex__throughput.avg.pct_of_peak_sustained_active
extra+=,launch__occupancy_limit_shared_mem,sm__cycles_active.avg.pct_of_peak_sustained_elapsed
metrics=$(ncu_metrics $extra)
profile() {
  local label=$1 setting=$2 kernels=$3 skip=$4
  env $setting FLASHLANE_CUDA_GRAPHS=0 timeout ${NCU_TIMEOUT:-90} $ncu --clock-control none --cache-control none \
    --kernel-name regex:"$kernels" --launch-skip $skip --launch-count 8 --metrics $metrics --csv \
    $FL bench --device cuda --model $dir --load-format dummy --streams 64 \
    --prompt-tokens 128 --new-tokens 8 > $OUT/ncu_$label.csv 2> $OUT/ncu_$label.err
  el "ncu $label rc=$?"
  ncu_summary $OUT/ncu_$label.csv | tee $OUT/ncu_$label.txt
}
# A round's 36 layers launch each kernel 36 (gate/up) or 108 (the rest) times: skip the first
# round's, then a layer's worth and more.
[ -z "${ONLY:-}" ] && room 95 ncu_default && profile default "FLASHLANE_AB=1" 'split_fold|walk_tma' 300
[ -z "${ONLY:-}" ] && room 95 ncu_tma && profile tma FLASHLANE_MATMUL_WALK=tma 'matmul_bf16_walk' 300
[ -z "${ONLY:-}" ] && room 95 ncu_tmak && profile tmak "FLASHLANE_MATMUL_WALK=tma FLASHLANE_MATMUL_WALK_K_GROUPS=auto" 'matmul_bf16_walk' 300
# x's splits at the default (NEXT.md item 2: the walk's with its norm took 7.7 µs a launch in the
# timeline against the tiles' 3.5): each launch alone here, so no walk fetches weights beside it.
room 95 ncu_split && profile split "FLASHLANE_AB=1" 'split_rows' 300
exit 0
