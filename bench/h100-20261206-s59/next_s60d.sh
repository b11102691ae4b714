#!/usr/bin/env bash
# Prepared in session 59 (not run). What holds the attention of a 64-stream Qwen3-4B round (19 %
# of it on the H100: 37 µs a layer for 64 streams of 128–192 keys, ~1.1–1.4 TB/s of K and V,
# session 59's timeline): ncu on `attention_grouped_staged8` (the default there) and on the
# launches around it that a fusion would remove (`attention_prep`, `split_rows`), dummy weights,
# graphs off, prompts of 128 and 512 tokens (longer keys: whether the time grows with the keys,
# or is a fixed cost a block). The same metrics as next_s59d.sh's matmul profile. ~150 s. Carry
# bench/peers/flashlane.xz (the model need not move); limit 300.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
dir=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $dir/
metrics=gpu__time_duration.sum,dram__throughput.avg.pct_of_peak_sustained_elapsed,lts__t_sectors.avg.pct_of_peak_sustained_elapsed
metrics+=,sm__warps_active.avg.pct_of_peak_sustained_active,smsp__issue_active.avg.pct_of_peak_sustained_active
metrics+=,l1tex__data_pipe_lsu_wavefronts_mem_shared.sum.pct_of_peak_sustained_elapsed
metrics+=,sm__pipe_fma_cycles_active.avg.pct_of_peak_sustained_active,launch__occupancy_limit_shared_mem
metrics+=,launch__occupancy_limit_registers,launch__registers_per_thread,launch__grid_size
for s in barrier long_scoreboard short_scoreboard math_pipe_throttle mio_throttle wait lg_throttle no_instruction; do
  metrics+=,smsp__average_warps_issue_stalled_${s}_per_issue_active.ratio
done
# LABEL PROMPT_TOKENS
profile() {
  local label=$1 prompt=$2
  FLASHLANE_CUDA_GRAPHS=0 timeout 120 $ncu --clock-control none --cache-control none \
    --kernel-name regex:'attention_grouped_staged8|attention_prep|split_rows$' \
    --launch-skip 300 --launch-count 18 --metrics $metrics --csv \
    $FL bench --device cuda --model $dir --load-format dummy --streams 64 \
    --prompt-tokens $prompt --new-tokens 16 > $OUT/ncu_att_$label.csv 2> $OUT/ncu_att_$label.err
  el "ncu $label rc=$?"
  ncu_summary $OUT/ncu_att_$label.csv
}
room 90 ncu_128 && profile p128 128
room 90 ncu_512 && profile p512 512
