#!/usr/bin/env bash
# Session 50, call A: the two off-by-default ways to fewer launches a decode step, tested then
# measured. (1) The attention's prep inside the per-head attention kernel
# (FLASHLANE_PREP_IN_ATTENTION=1, `attention_gated_prep`): its kernel test against
# attention_prep then attention_gated. (2) Session 49's input RMSNorm in the 16-row matmuls
# (FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=N): its kernel tests, also with early weights (the dense
# models' wait path). Every other kernel test too. Then the A/B on Qwen3-0.6B and -4B at 1 and 8
# streams, of each variant whose tests passed.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default model moved out of
# the tree for the call).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
# Every kernel test (the new ones among them), at the defaults; the kernels' PTX cache
# (FLASHLANE_KERNEL_CACHE, new) spares the recompiles of one source.
FLASHLANE_REQUIRE_GPU=1 timeout 260 $b/backend_cuda --test-threads 1 > $OUT/tests_kernels.txt 2>&1
rc=$?; el "backend_cuda rc=$rc"; grep -E "test result|panicked|FAILED|failed" $OUT/tests_kernels.txt; ls ~/.cache/flashlane/kernels | wc -l
grep -q "prep_in_attention_gives_the_bits" $OUT/tests_kernels.txt || { el "stale packs: repack (bench/pack_gpu_tests.sh --flashlane)"; exit 1; }
FLASHLANE_MATMUL_EARLY_WEIGHTS=1 FLASHLANE_REQUIRE_GPU=1 timeout 120 $b/backend_cuda norm_twins --test-threads 1 \
  > $OUT/tests_kernels_early.txt 2>&1
rc2=$?; el "backend_cuda norm_twins (early weights) rc=$rc2"; grep -E "test result|panicked" $OUT/tests_kernels_early.txt
# Each variant measured only where its kernel test passed.
p_ok=$(grep -q "prep_in_attention_gives_the_bits_of_prep_then_attention ... ok" $OUT/tests_kernels.txt && echo 1 || echo 0)
n_ok=$(grep -q "norm_twins_give_the_bits_of_the_norm_then_the_matmul ... ok" $OUT/tests_kernels.txt && [ $rc2 = 0 ] && echo 1 || echo 0)
el "prep ok=$p_ok norm ok=$n_ok"
S="base:FLASHLANE_AB=1"
[ $p_ok = 1 ] && S="$S p1:FLASHLANE_PREP_IN_ATTENTION=1"
[ $n_ok = 1 ] && S="$S n1:FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=1"
[ $p_ok = 1 ] && [ $n_ok = 1 ] && S="$S p1n2:FLASHLANE_PREP_IN_ATTENTION=1,FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=2"
for shape in qwen3-0.6b qwen3-4b; do
  # A lease with little device time left: the one-stream target (Qwen3-0.6B) first, the rest if
  # there is room.
  [ $shape = qwen3-4b ] && [ $(( $(date +%s) - T0 )) -gt ${AB_4B_BY:-330} ] && { el "no time for $shape"; break; }
  SETTINGS="$S" STREAMS=1,8 NEW_TOKENS=64 ROUNDS=2 RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "A/B $shape rc=$?"; cat /tmp/ab_$shape/ab.txt /tmp/ab_$shape/ab_means.txt | tee -a $OUT/ab.txt
done
