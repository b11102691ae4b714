#!/usr/bin/env bash
# Prepared in session 57 (not run). What holds the 64-row k split (`matmul_bf16_tiled_split`,
# 60 % of Qwen3-4B's 64-stream round on the H200 at ~1.2–1.7 TB/s): ncu on its launches in a
# 64-stream decode (dummy weights, graphs off), the DRAM and L2 throughput, the tensor pipe's
# and the shared-memory pipe's use, the warps' stall reasons, as the default runs and with the
# cluster fold (FLASHLANE_MATMUL_CLUSTER_FOLD=1: `matmul_bf16_tiled_split_fold`, no partials
# written). Session 40's ncu found it latency-bound (0.44 eligible warps a scheduler) but did
# not read the pipes: at 64 rows each weight meets 128 MMA products (x split hi and lo), so
# mma.sync's rate may bound it on the H200. ~200 s. Carry bench/peers/flashlane.xz (the model
# need not move: ~31 MB carried); limit 300.
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
for setting in default:FLASHLANE_AB=1 fold:FLASHLANE_MATMUL_CLUSTER_FOLD=1; do
  label=${setting%%:*}
  env ${setting#*:} FLASHLANE_CUDA_GRAPHS=0 timeout 120 $ncu --clock-control none --cache-control none \
    --kernel-name regex:'matmul_bf16_tiled_split' --launch-skip 600 --launch-count 12 \
    --metrics $metrics --csv $FL bench --device cuda --model $dir --load-format dummy --streams 64 \
    --prompt-tokens 128 --new-tokens 16 > $OUT/ncu_split_$label.csv 2> $OUT/ncu_split_$label.err
  el "ncu $label rc=$?"
  python3 - $OUT/ncu_split_$label.csv <<'PY'
import csv, sys, collections
rows = [r for r in csv.reader(open(sys.argv[1])) if len(r) > 10]
if not rows: sys.exit("no rows")
head = rows[0]; k = head.index("Kernel Name"); m = head.index("Metric Name"); v = head.index("Metric Value")
by = collections.defaultdict(list)
for r in rows[1:]:
    try: by[(r[k], r[m])].append(float(r[v].replace(",", "")))
    except ValueError: pass
for (kern, metric), vals in sorted(by.items()):
    print(f"{kern[:40]:40} {metric[:80]:80} mean {sum(vals)/len(vals):10.2f} of {len(vals)}")
PY
done
