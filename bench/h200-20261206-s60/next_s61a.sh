#!/usr/bin/env bash
# Prepared in session 60 (not run). Why the persistent split (FLASHLANE_MATMUL_STREAM) lost 13–22 %
# on the H200, and what holds the default 64-row split there (the H200's 41 % more bandwidth gave
# flashlane's 64-stream round ~12 % over the H100, llama.cpp's 21 %):
# 1. Qwen3-4B's kernel timelines at 64 streams, default / `=1` / `=ring`: each matmul's µs a layer
#    (session 60's call cut them from its output).
# 2. ncu on one layer's matmuls at 64 streams, default (`matmul_bf16_tiled_split_fold*`, the
#    down's unfolded split) and `=1` (`matmul_bf16_stream*`): DRAM, L2, shared-memory pipe,
#    warps active, issue, FMA pipe, and the stall reasons per issue (barrier, long and short
#    scoreboard, MIO throttle, math pipe, wait).
# 3. If there is room, session 59's attention profile (bench/h100-20261206-s59/next_s60d.sh's
#    metrics on `attention_grouped_staged8`, prompts 128 and 512).
# ~330 s. Carry bench/peers/flashlane.xz (the default model moved out of the tree); limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
TL="tl:FLASHLANE_TIMELINE=1 tlstream:FLASHLANE_TIMELINE=1,FLASHLANE_MATMUL_STREAM=1 tlring:FLASHLANE_TIMELINE=1,FLASHLANE_MATMUL_STREAM=ring"
room 110 timeline && {
  ab tl_4b qwen3-4b 64 "$TL" $FL > /dev/null
  for f in /tmp/ab_tl_4b/*.round1.err; do
    # The 64-row part: its launches by µs, then one layer's launches one by one.
    { echo "=== $(basename $f)"; awk '/^  rows 64:/{on=1} on{print; n++} n>=45{exit}' $f; } >> $OUT/timeline_64.txt
  done
  el "timeline"; grep -E "===|rows 64:|matmul_bf16_(tiled|stream)" $OUT/timeline_64.txt | head -40
}
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
dir=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $dir/
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed
metrics+=,l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum,smsp__inst_executed_pipe_lsu.avg.pct_of_peak_sustained_active
metrics+=,sm__pipe_tensor_cycles_active.avg.pct_of_peak_sustained_active,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active
metrics+=,launch__occupancy_limit_shared_mem,launch__occupancy_limit_registers,launch__registers_per_thread,launch__grid_size
for s in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait lg_throttle membar no_instruction; do
  metrics+=,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
# LABEL SETTING(VAR=VALUE or none) KERNEL_REGEX
profile() {
  local label=$1 setting=$2 kernels=$3
  env $setting FLASHLANE_CUDA_GRAPHS=0 timeout 120 $ncu --clock-control none --cache-control none \
    --kernel-name regex:"$kernels" --launch-skip 200 --launch-count 12 --metrics $metrics --csv \
    $FL bench --device cuda --model $dir --load-format dummy --streams 64 \
    --prompt-tokens 128 --new-tokens 16 > $OUT/ncu_$label.csv 2> $OUT/ncu_$label.err
  el "ncu $label rc=$?"
  ncu_summary $OUT/ncu_$label.csv
}
room 90 ncu_default && profile mm_default FLASHLANE_AB=1 'matmul_bf16_tiled_split'
room 90 ncu_stream && profile mm_stream FLASHLANE_MATMUL_STREAM=1 'matmul_bf16_stream|matmul_bf16_tiled_split'
room 90 ncu_att && profile att_p128 FLASHLANE_AB=1 'attention_grouped_staged8|attention_prep|split_rows$'
