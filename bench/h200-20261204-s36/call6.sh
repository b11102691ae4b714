#!/usr/bin/env bash
# Session 36, call 6: (1) what the exact products cost at many streams: --matmul-input bf16 (x
# rounded to bf16, one product a step, as llama.cpp and vLLM multiply bf16 weights; other
# replies) against the default exact products on Qwen3-4B and -8B at 1, 32 and 64 streams;
# (2) ncu's full set on two launches of the 64-stream k-split matmul of Qwen3-4B (stall reasons,
# memory and tensor throughput): information for the next change. flashlane at 7577123.
# Carry bench/peers/flashlane.xz.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
S="exact:FLASHLANE_AB=1 bf16:FLASHLANE_MATMUL_INPUT=bf16"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S" STREAMS=1,32,64 ROUNDS=1 timeout 120 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_input.txt
done
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
dir=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $dir/
mkdir -p /tmp/full
for ks in matmul_bf16_tiled_split:300 matmul_fold_residues_swiglu:80; do
  k=${ks%%:*}; skip=${ks#*:}
  FLASHLANE_CUDA_GRAPHS=0 timeout 80 $ncu --set full -k regex:"^$k\$" --launch-skip $skip --launch-count 2 \
    $FL bench --device cuda --model $dir --load-format dummy --streams 64 --prompt-tokens 16 --new-tokens 6 \
    > /tmp/full/qwen3-4b.$k.txt 2>&1
  el "$k rc=$?"
  grep -E "^  [a-z_0-9]+|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Registers Per|Grid Size|L2 Hit Rate|Issue Slots Busy|No Eligible" /tmp/full/qwen3-4b.$k.txt | head -24
done
tar -C /tmp -cJf $OUT/ncu_split.tar.xz full
el total
