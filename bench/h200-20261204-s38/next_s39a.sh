#!/usr/bin/env bash
# Prepared in session 38 (no GPU after its first call) for the next device session's first call.
# 1. The kernel tests of the k split on the warpgroup MMA with the operands swapped
#    (`matmul_bf16_wg_split_n32` / `_n64` and `matmul_fp8_wg_split_*`,
#    FLASHLANE_MATMUL_WG_SPLIT=1, written without a GPU): `wgmma_matmul_gives_the_other_kernels_bits`
#    (every kernel's bits at 1-40, 1-64 and 1-300 rows, gathered and accumulated), the SwiGLU
#    test (its fold with the SwiGLU) and the FP8 matmul test (the FP8 kernels' bits).
# 2. Where they pass, Qwen3-4B and -8B, bf16 and FP8, at 17, 24, 32, 48 and 64 streams, two
#    rounds: the defaults (bf16: the tiles' split; FP8: the 16-row kernels) against wgsplit.
# 3. Where the bf16 tests pass, the prompts' swapped matmul (`matmul_bf16_wg_swap`,
#    FLASHLANE_MATMUL_WG_SWAP=1): Qwen3-4B and -8B prefill of 1, 8, 32 and 64 prompts of 128
#    tokens (128 to 8,192 rows) against the tiles and `matmul_bf16_wgmma`.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the model moved out); ~500 s.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
# The bf16 kernels' tests, then the FP8 one's (its filter also runs the bf16 matmul test):
# each kind's A/B runs only where its tests passed.
test_ok() {
  FLASHLANE_REQUIRE_GPU=1 timeout 120 $b/backend_cuda "$1" --test-threads 1 >> $OUT/tests_wg_split.txt 2>&1
  local rc=$?; el "backend_cuda $1 rc=$rc"; return $rc
}
bf16=1; fp8=1
test_ok wgmma_matmul_gives_the_other_kernels_bits || bf16=0
test_ok gate_up_swiglu || bf16=0
test_ok matmul_matches_backend || fp8=0
grep -E "^test .*(ok|FAILED)|test result|panicked|differs" $OUT/tests_wg_split.txt | tail -16
shapes=""
[ $bf16 = 1 ] && shapes="qwen3-4b qwen3-8b"
[ $fp8 = 1 ] && shapes="$shapes qwen3-4b-fp8 qwen3-8b-fp8"
S="base:FLASHLANE_AB=1 wgsplit:FLASHLANE_MATMUL_WG_SPLIT=1"
for shape in $shapes; do
  SETTINGS="$S" STREAMS=17,24,32,48,64 ROUNDS=2 timeout 110 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt /tmp/ab_$shape/ab_means.txt | tee -a $OUT/ab_wg_split.txt
done
if [ $bf16 = 1 ]; then
  S="base:FLASHLANE_AB=1 swap:FLASHLANE_MATMUL_WG_SWAP=1"
  for shape in qwen3-4b qwen3-8b; do
    SETTINGS="$S" STREAMS=1,8,32,64 NEW_TOKENS=16 ROUNDS=2 timeout 100 bench/gpu_ab.sh /tmp/sw_$shape $shape $FL > /tmp/sw_$shape.log 2>&1
    el "$shape swap rc=$?"
    cat /tmp/sw_$shape/ab.txt /tmp/sw_$shape/ab_means.txt | tee -a $OUT/ab_wg_swap.txt
  done
fi
