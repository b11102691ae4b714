#!/usr/bin/env bash
# Prepared in session 60 (not run). The persistent split with W by TMA (FLASHLANE_MATMUL_STREAM=tma,
# written after session 60's device time: never run on a GPU), and why the persistent split lost
# 13–22 % on the H200 (the H200's 41 % more bandwidth gave flashlane's 64-stream round ~12 % over
# the H100, llama.cpp's 21 %):
# 0. The kernel tests with the TMA cases (matmul, gate/up SwiGLU, SwiGLU split); nothing of TMA
#    runs after this unless they pass.
# 1. Decode A/B default / `=1` / `=tma` (its ring as deep as fits: 7 chunks on Qwen3-4B's 2,560-deep
#    matrices, 4 on -8B's) / `=tma` with a ring of 4 on Qwen3-4B at 48, 64 and -8B at 64.
# 2. Qwen3-4B's kernel timelines at 64 streams, default / `=1` / `=tma`: each matmul's µs a layer
#    (session 60's call cut them from its output).
# 3. ncu on one layer's matmuls at 64 streams, default (`matmul_bf16_tiled_split_fold*`, the
#    down's unfolded split) and `=tma`: DRAM, L2, shared-memory pipe, warps active, issue, tensor
#    pipe, and the stall reasons per issue (barrier, long and short scoreboard, MIO throttle, …).
# ~450 s. Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz} (the default model moved out of the
# tree: neither reads it); limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s61_kernels 200 matmul_matches_backend_cpu_gathers swiglu_split_in_fold gate_up_swiglu_gives_the_bits --nocapture
tma_ok=0; grep -q "test result: ok. 3 passed" $OUT/tests_s61_kernels.txt && tma_ok=1
if [ $tma_ok = 1 ]; then
  S="default:FLASHLANE_AB=1 stream:FLASHLANE_MATMUL_STREAM=1 tma:FLASHLANE_MATMUL_STREAM=tma tma4:FLASHLANE_MATMUL_STREAM=tma,FLASHLANE_MATMUL_STREAM_TMA_STAGES=4"
  room 150 ab_4b && ab ab_4b qwen3-4b 48,64 "$S" $FL
  room 100 ab_8b && ab ab_8b qwen3-8b 64 "$S" $FL
  TL="tl:FLASHLANE_TIMELINE=1 tlstream:FLASHLANE_TIMELINE=1,FLASHLANE_MATMUL_STREAM=1 tltma:FLASHLANE_TIMELINE=1,FLASHLANE_MATMUL_STREAM=tma"
else
  el "kernel tests did not all pass: no TMA runs"
  TL="tl:FLASHLANE_TIMELINE=1 tlstream:FLASHLANE_TIMELINE=1,FLASHLANE_MATMUL_STREAM=1"
fi
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
if [ $tma_ok = 1 ]; then
  room 90 ncu_tma && profile mm_tma FLASHLANE_MATMUL_STREAM=tma 'matmul_bf16_stream|matmul_bf16_tiled_split'
else
  room 90 ncu_stream && profile mm_stream FLASHLANE_MATMUL_STREAM=1 'matmul_bf16_stream|matmul_bf16_tiled_split'
fi
room 90 ncu_att && profile att_p128 FLASHLANE_AB=1 'attention_grouped_staged8|attention_prep|split_rows$'
