#!/usr/bin/env bash
# Prepared in session 46 (written after its device time ran out): a prompt's FP8 matmuls on the
# warpgroup MMA with the operands swapped, unsplit (`matmul_fp8_wg_swap`,
# FLASHLANE_MATMUL_WG_SWAP=fp8, off by default): blocks of 64 rows x 128 outputs walking every
# residue, the FP8 kernels' chain, each weight read once per 64 rows where the 16-row FP8
# kernels read it once per 16 (Qwen3-4B-FP8's prefill of 64 x 128 tokens ran at 5,462 tok/s
# against bf16's 17,473 on the H100, session 46). Every other kernel's PTX is unchanged
# (`tools/cuda_check/cuda_check.py --compare`); the new kernel: 128 registers, no spills.
# 1. The kernel tests (the FP8 test now runs the swap at 1-164 rows beside the 16-row kernels
#    and the split; matmul_case runs the bf16 swap), then the whole-model GPU tests with it on
#    (the warpgroup module compiled in every model, so the small fixtures reach it).
# 2. Where they pass: the FP8 shapes' prefill and decode, default against it, 2 rounds.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}; ~400 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
ok=1
for t in fp8_matmul_matches matmul_matches_backend wgmma_matmul_gives gate_up_swiglu; do
  FLASHLANE_REQUIRE_GPU=1 timeout 150 $b/backend_cuda "$t" --test-threads 1 >> $OUT/tests_swap.txt 2>&1
  rc=$?; el "backend_cuda $t rc=$rc"; [ $rc = 0 ] || ok=0
done
grep -E "^test .*(ok|FAILED)|test result|panicked" $OUT/tests_swap.txt | tail -16
[ $ok = 1 ] || exit 1
TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures" SETTINGS="swap:FLASHLANE_MATMUL_WG_SWAP=fp8,FLASHLANE_MATMUL_WGMMA=1" \
  timeout 200 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests/summary.txt
S="base:FLASHLANE_AB=1 swap:FLASHLANE_MATMUL_WG_SWAP=fp8"
for shape in qwen3-4b-fp8 qwen3-next-a3b-slice-fp8 qwen3-8b-fp8; do
  SETTINGS="$S" STREAMS=1,8,64 NEW_TOKENS=32 ROUNDS=2 timeout 100 bench/gpu_ab.sh /tmp/sw_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/sw_$shape/ab.txt /tmp/sw_$shape/ab_means.txt | tee -a $OUT/ab_fp8_swap.txt
done
