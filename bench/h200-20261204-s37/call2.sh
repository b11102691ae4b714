#!/usr/bin/env bash
# Session 37, call 2: the k split of 48-64-row rounds on the warpgroup MMA
# (matmul_bf16_wgmma_split_s3 / _s4, FLASHLANE_MATMUL_SPLIT_WGMMA=3|4; off by default). The
# warpgroup matmul's kernel test with both (bit for bit against every other kernel), then
# Qwen3-4B and -8B at 48 and 64 streams, two rounds, against the tiles' split.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
for f in wgmma_matmul_gives matmul_matches_backend; do
  FLASHLANE_REQUIRE_GPU=1 timeout 60 $b/backend_cuda $f --test-threads 1 >> $OUT/tests_wgsplit.txt 2>&1
  el "backend_cuda $f rc=$?"
done; grep -E "^test .*(ok|FAILED)|test result|panicked" $OUT/tests_wgsplit.txt | tail -8
S="base:FLASHLANE_AB=1 wg3:FLASHLANE_MATMUL_SPLIT_WGMMA=3 wg4:FLASHLANE_MATMUL_SPLIT_WGMMA=4"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S" STREAMS=48,64 ROUNDS=2 timeout 170 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_wgsplit.txt
done
tail -5 /tmp/ab_qwen3-4b.log > $OUT/ab_log_tail.txt
