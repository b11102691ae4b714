#!/usr/bin/env bash
# RAN in session 62 (H100, bench/h100-20261207-s62/call1/); its switches are removed since
# (clusters, prefetch), so as it stands it names a kernel test that no longer exists
# (swapped_clusters_give_the_other_kernels_bits) and A/B settings that do nothing.
# Session 62, call 1: session 61's call1.sh (never ran), with session 62's one-stream switches
# first:
# 0. The kernel tests: the persistent split's TMA cases (matmul, gate/up SwiGLU, SwiGLU split;
#    FLASHLANE_MATMUL_STREAM=tma never ran on a GPU), the narrow swapped kernel over clusters
#    (FLASHLANE_MATMUL_SWAP_CLUSTER=2|4) and the swapped chain with its weights' L2 prefetch
#    (FLASHLANE_MATMUL_SWAP_PREFETCH=2). A switch runs below only where its tests passed.
# 1. `one_row_grid_balance_times`: a one-row launch's µs against its blocks (66–528), one block a
#    tile and over clusters of 2 and 4 (flat from 132 to 264 blocks says a block's own loads in
#    flight bound it; doubling says the multiprocessor's share of bandwidth does); then Qwen3-4B's
#    four one-row matrices whole, without and with the L2 prefetch 1, 2, 4 batches ahead.
# 2. One-stream (and two) decode A/B on Qwen3-4B: default / prefetch 1, 2, 4 / clusters of 4.
# 3. Session 61's: decode A/B default / `=tma` / `=tma` with a ring of 4 on Qwen3-4B at 48, 64;
#    gpu_dense and gpu_fixtures with every matmul split on `=tma`; -8B's A/B at 64; Qwen3-4B's
#    64-stream timelines; ncu of one layer's matmuls at 64 streams (default, `=tma`).
# Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz} (the default model moved out of the tree:
# nothing here reads it); limit 600. Short of time: LIMIT=N skips what does not fit; ONE_STREAM=0
# skips parts 1 and 2 (for a second call after a first that ran them).
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s62_kernels 240 matmul_matches_backend_cpu_gathers swiglu_split_in_fold gate_up_swiglu_gives_the_bits \
  swapped_clusters_give_the_other_kernels_bits swapped_chain_gives_the_bits_of_the_16_row_kernels --nocapture
# A test may print before its `ok` (on the same line): read the names that failed instead.
passed() { grep -qE "test result: ok" $OUT/tests_s62_kernels.txt && ! grep -qE "^    kernels::tests::($1)" $OUT/tests_s62_kernels.txt && echo "$2"; }
tma_ok=0; [ "$(passed 'matmul_matches_backend_cpu_gathers|swiglu_split_in_fold|gate_up_swiglu_gives_the_bits' 3)" = 3 ] && tma_ok=1
clu_ok=0; [ "$(passed swapped_clusters_give_the_other_kernels_bits 1)" = 1 ] && clu_ok=1
pf_ok=0; [ "$(passed swapped_chain_gives_the_bits_of_the_16_row_kernels 1)" = 1 ] && pf_ok=1
el "tma_ok=$tma_ok clu_ok=$clu_ok pf_ok=$pf_ok"
[ "${ONE_STREAM:-1}" = 1 ] && room 120 balance && { kernel_tests balance 120 one_row_grid_balance_times --ignored --nocapture; grep -E "^(depth|Qwen3-4B)" $OUT/tests_balance.txt; }
# One stream (and two): the weights' L2 prefetch 1, 2, 4 batches ahead (at k 2,560 a warp walks 5
# chunks: 3 batches of the narrow kernel, 5 of the t2), the o and down projections' tiles over
# clusters of 4 blocks.
C1S="default:FLASHLANE_AB=1"
[ $pf_ok = 1 ] && C1S+=" pf1:FLASHLANE_MATMUL_SWAP_PREFETCH=1 pf2:FLASHLANE_MATMUL_SWAP_PREFETCH=2 pf4:FLASHLANE_MATMUL_SWAP_PREFETCH=4"
[ $clu_ok = 1 ] && C1S+=" c4:FLASHLANE_MATMUL_SWAP_CLUSTER=4"
[ "${ONE_STREAM:-1}" = 1 ] && room 150 ab_1s && ab ab_1s qwen3-4b 1,2 "$C1S" $FL
if [ $tma_ok = 1 ]; then
  S=${AB_SETTINGS:-"default:FLASHLANE_AB=1 tma:FLASHLANE_MATMUL_STREAM=tma tma4:FLASHLANE_MATMUL_STREAM=tma,FLASHLANE_MATMUL_STREAM_TMA_STAGES=4"}
  room ${AB_4B_S:-130} ab_4b && ab ab_4b qwen3-4b ${STREAMS_4B:-48,64} "$S" $FL
  TL="tl:FLASHLANE_TIMELINE=1 tltma:FLASHLANE_TIMELINE=1,FLASHLANE_MATMUL_STREAM=tma"
else
  el "kernel tests did not all pass: no TMA runs"
  TL="tl:FLASHLANE_TIMELINE=1"
fi
# The whole-model tests that need no default model (the dense fixture, the fixtures), every
# model's matmuls split on the persistent split with W by TMA.
[ $tma_ok = 1 ] && room 90 tma_tests && {
  SETTINGS="tma:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_STREAM=tma" PARALLEL=1 \
    TESTS="gpu_dense gpu_fixtures" TEST_TIMEOUT=80 bench/gpu_tests.sh /tmp/tw > /dev/null 2>&1
  el "tma tests rc=$?"; tee $OUT/tests_summary_tma.txt < /tmp/tw/summary.txt
}
[ $tma_ok = 1 ] && room 90 ab_8b && ab ab_8b qwen3-8b 64 "$S" $FL
room 80 timeline && {
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
# LABEL SETTING(VAR=VALUE) KERNEL_REGEX
profile() {
  local label=$1 setting=$2 kernels=$3
  env $setting FLASHLANE_CUDA_GRAPHS=0 timeout 110 $ncu --clock-control none --cache-control none \
    --kernel-name regex:"$kernels" --launch-skip 200 --launch-count 12 --metrics $metrics --csv \
    $FL bench --device cuda --model $dir --load-format dummy --streams 64 \
    --prompt-tokens 128 --new-tokens 16 > $OUT/ncu_$label.csv 2> $OUT/ncu_$label.err
  el "ncu $label rc=$?"
  ncu_summary $OUT/ncu_$label.csv
}
room 80 ncu_default && profile mm_default FLASHLANE_AB=1 'matmul_bf16_tiled_split'
room 80 ncu_attention && profile att_default FLASHLANE_AB=1 "attention_grouped"
[ $tma_ok = 1 ] && room 80 ncu_tma && profile mm_tma FLASHLANE_MATMUL_STREAM=tma 'matmul_bf16_stream|matmul_bf16_tiled_split'
exit 0
