#!/usr/bin/env bash
# For the next device session (written in session 21, not yet run): the tensor-core probe (does
# a wgmma sum as mma.sync does?), where the tiles over split rows stall (ncu), and the two switches prepared
# off by default — FLASHLANE_MATMUL_SPLIT_K=1 (k split by residue over blocks for 32-64-row
# matmuls) and FLASHLANE_ATTENTION_FEW_WARPS=1 (a prompt's attention by 4 warps a block) — their
# kernel tests (bits against the other kernels), the matmul times with the split, and A/Bs on
# the 4B shape and the A3B slice; then the one-stream attention kernel's time before and after
# session 21 (carry bench/peers/flashlane_old.xz, a d317402 build, for that). Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz}
# (bench/pack_gpu_tests.sh --flashlane) with the default model moved out of the tree.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
timeout 150 $B/backend_cuda attention matmul --test-threads 1 > $OUT/kernel_tests.txt 2>&1
echo "kernel tests rc=$? at $(el) s"; grep "test result\|panicked" $OUT/kernel_tests.txt
# Auto's own choice splitting k too (the gathered and row-alone runs of matmul_case).
FLASHLANE_MATMUL_SPLIT_K=1 timeout 100 $B/backend_cuda matmul --test-threads 1 > $OUT/kernel_tests_splitk.txt 2>&1
echo "matmul tests, split k on, rc=$? at $(el) s"; grep "test result\|panicked" $OUT/kernel_tests_splitk.txt
# Whether a wgmma sums as mma.sync does (the chain a warpgroup matmul would have to keep).
timeout 60 $B/backend_cuda --ignored tensor_core_numerics_probe --nocapture --test-threads 1 > $OUT/tc_probe.txt 2>&1
echo "tensor-core probe rc=$? at $(el) s"; grep -v "^$" $OUT/tc_probe.txt | tail -4
timeout 120 $B/backend_cuda --ignored matmul_kernel_times --nocapture --test-threads 1 > $OUT/matmul_times.txt 2>&1
echo "times rc=$? at $(el) s"
grep -E "rows +(32|48|64):" $OUT/matmul_times.txt | grep -E "4B|A3B (lin|qkv)" | sed -E 's/Narrow.*Tiled /... Tiled /; s/Deep.*//'
# Where the tiles over split rows stall now (session 21 profiled the old ones: ~12 instructions an MMA).
d=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $d/
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
FLASHLANE_CUDA_GRAPHS=0 timeout 90 $ncu --kernel-name regex:'matmul_bf16_tiled' --launch-skip 2 --launch-count 2 \
  --section SpeedOfLight --section WarpStateStats --section ComputeWorkloadAnalysis --section InstructionStats \
  --section Occupancy $FL bench --device cuda --model $d --load-format dummy --streams 1 --prompt-tokens 512 \
  --new-tokens 2 > $OUT/tiled_detail.txt 2>&1
echo "tiled ncu rc=$? at $(el) s"
for shape in qwen3-4b qwen3-next-a3b-slice; do
  SETTINGS="base:FLASHLANE_AB=1 splitk:FLASHLANE_MATMUL_SPLIT_K=1 few:FLASHLANE_ATTENTION_FEW_WARPS=1" \
    ROUNDS=1 STREAMS=1,32,64 timeout 240 bench/gpu_ab.sh /tmp/ab-$shape $shape $FL > /dev/null 2>&1
  echo "A/B $shape rc=$? at $(el) s"; cat /tmp/ab-$shape/ab.txt | tee -a $OUT/ab.txt
done
# The A3B slice's one stream lost 1-2 % with the grouped attention code (session 21): the
# per-head kernel's time before (d317402, bench/peers/flashlane_old.xz if carried) and now.
if [ -f bench/peers/flashlane_old.xz ]; then
  OLD=/tmp/fl_old; xz -dc bench/peers/flashlane_old.xz > $OLD; chmod +x $OLD
  for which in old new; do
    BIN=$FL; [ $which = old ] && BIN=$OLD
    NEW_TOKENS=12 RUN_TIMEOUT=60 timeout 70 bench/gpu_profile.sh /tmp/p-$which qwen3-next-a3b-slice $BIN 1 \
      2>&1 | grep -E "per decode step|attention" | sed "s/^/$which: /" | tee -a $OUT/attention_1stream.txt
  done
fi
echo "total $(el) s"
