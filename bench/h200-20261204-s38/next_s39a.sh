#!/usr/bin/env bash
# Prepared in session 38 (no GPU after its first call) for the next device session's first call.
# 1. The kernel tests of the k split on the warpgroup MMA with the operands swapped
#    (`matmul_bf16_wg_split_n32` / `_n64`, FLASHLANE_MATMUL_WG_SPLIT=1, written without a GPU):
#    `wgmma_matmul_gives_the_other_kernels_bits` (every kernel's bits at 1-40, 1-64 and 1-300
#    rows, gathered and accumulated) and the SwiGLU test (its fold with the SwiGLU).
# 2. Where they pass, Qwen3-4B and -8B at 17, 24, 32, 48 and 64 streams, two rounds: the
#    defaults (the tiles' split) against wgsplit.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the model moved out).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
ok=1
for f in wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu matmul_matches_backend; do
  FLASHLANE_REQUIRE_GPU=1 timeout 120 $b/backend_cuda $f --test-threads 1 >> $OUT/tests_wg_split.txt 2>&1
  rc=$?; el "backend_cuda $f rc=$rc"; [ $rc = 0 ] || ok=0
done
grep -E "^test .*(ok|FAILED)|test result|panicked" $OUT/tests_wg_split.txt | tail -12
[ $ok = 1 ] || { echo "a kernel test failed: no A/B"; exit 0; }
S="base:FLASHLANE_AB=1 wgsplit:FLASHLANE_MATMUL_WG_SPLIT=1"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S" STREAMS=17,24,32,48,64 ROUNDS=2 timeout 230 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt /tmp/ab_$shape/ab_means.txt | tee -a $OUT/ab_wg_split.txt
done
