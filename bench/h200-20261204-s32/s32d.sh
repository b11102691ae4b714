#!/usr/bin/env bash
# Session 32, call 4: why the one-stream kernels run below the HBM's rate: ncu's full set
# (stall reasons, memory throughput, occupancy) on two decode-step launches of each of the
# costliest one-stream kernels of Qwen3-0.6B and the A3B slice (graphs off, dummy weights,
# flashlane at 9c99e15's code). Information for the next change; no figure here is a speed.
# Carry bench/peers/flashlane.xz.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
mkdir -p /tmp/full
for shape in qwen3-0.6b qwen3-next-a3b-slice; do
  dir=$(mktemp -d); cp bench/shapes/$shape/config.json $dir/
  case $shape in
    qwen3-0.6b) kernels="matmul_bf16_narrow matmul_bf16_t[34]_deep matmul_bf16_swiglu_t rmsnorm_rows" ;;
    *) kernels="moe_gate_up_t2 matmul_bf16_narrow moe_down" ;;
  esac
  for k in $kernels; do
    FLASHLANE_CUDA_GRAPHS=0 timeout 60 $ncu --set full -k regex:"^$k" --launch-skip 70 --launch-count 2 \
      $FL bench --device cuda --model $dir --load-format dummy --streams 1 --prompt-tokens 16 --new-tokens 8 \
      > /tmp/full/$shape.$k.txt 2>&1
    el "$shape $k rc=$?"
    grep -E "^  [a-z_0-9]+|Duration|DRAM Throughput|Achieved Occupancy|Registers Per|Grid Size|L2 Hit Rate" /tmp/full/$shape.$k.txt | head -12
    tar -C /tmp -cJf $OUT/ncu_full.tar.xz full
  done
done
el "total"
