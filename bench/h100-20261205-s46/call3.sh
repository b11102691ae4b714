#!/usr/bin/env bash
# Session 46, call 3: run unchanged from bench/h200-20261205-s44/next_s45c.sh (on an H100).
# Prepared in session 44 (written after its device time ran out): the tiles' early weight copies
# (FLASHLANE_MATMUL_TILED_EARLY_WEIGHTS=1, off by default; the default kernels' PTX unchanged).
# 1. The matmul kernel tests with it on (the tiles, their k splits, the SwiGLU fold): the same
#    bits as every other kernel.
# 2. Where they pass, Qwen3-4B and -8B at 32, 48 and 64 streams (the tiles' k split) and their
#    prefill of 1 and 64 prompts of 128 tokens (the tiles, the prompt split), two rounds.
# 3. Whether the hybrid models' FP8 projections would gain from the warpgroup split as the dense
#    FP8 shapes did (session 44: +11-50 % at 17-64 streams): the A3B slice's FP8 twin with k
#    split and the warpgroup module forced (FLASHLANE_MATMUL_SPLIT_K=1, FLASHLANE_MATMUL_WGMMA=1:
#    its FP8 rounds of 17-64 rows then take the split; its bf16 matmuls split and its prompts of
#    128+ rows take the warpgroup MMA too, so this bounds the change, not yet a default) against
#    its defaults at 8, 24, 40 and 64 streams.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the model moved out); ~330 s.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
ok=1
for t in matmul_matches_backend gate_up_swiglu wgmma_matmul_gives; do
  FLASHLANE_MATMUL_TILED_EARLY_WEIGHTS=1 FLASHLANE_REQUIRE_GPU=1 timeout 120 $b/backend_cuda "$t" --test-threads 1 >> $OUT/tests_tiled_early.txt 2>&1
  rc=$?; el "backend_cuda $t rc=$rc"; [ $rc = 0 ] || ok=0
done
grep -E "^test .*(ok|FAILED)|test result|panicked" $OUT/tests_tiled_early.txt | tail -12
[ $ok = 1 ] || exit 1
S="base:FLASHLANE_AB=1 early:FLASHLANE_MATMUL_TILED_EARLY_WEIGHTS=1"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S" STREAMS=1,32,48,64 NEW_TOKENS=64 ROUNDS=2 timeout 110 bench/gpu_ab.sh /tmp/te_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/te_$shape/ab.txt /tmp/te_$shape/ab_means.txt | tee -a $OUT/ab_tiled_early.txt
done
S="base:FLASHLANE_AB=1 wg:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_MATMUL_WGMMA=1"
SETTINGS="$S" STREAMS=8,24,40,64 NEW_TOKENS=64 ROUNDS=2 timeout 120 bench/gpu_ab.sh /tmp/hy qwen3-next-a3b-slice-fp8 $FL > /dev/null 2>&1
el "a3b-slice-fp8 rc=$?"
cat /tmp/hy/ab.txt /tmp/hy/ab_means.txt | tee -a $OUT/ab_hybrid_fp8.txt
