#!/usr/bin/env bash
# Prepared in session 36 for the next device session (not yet run: the session had 201 device-seconds left, too few to start a machine): the k split with blocks of half the
# outputs (matmul_bf16_tiled_split_half; FLASHLANE_MATMUL_SPLIT_HALF_BELOW=N runs it for splits of
# fewer than N blocks of 128 outputs; off by default). The matmul kernel tests with every split on
# it (bit for bit against the other kernels), then Qwen3-4B and -8B at 64 streams: as built, the
# half blocks below 264 (4B's o/down: 160 blocks; 8B's: 256), and for every split.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
for f in matmul_matches_backend matmul_with_bf16; do
  FLASHLANE_MATMUL_SPLIT_HALF_BELOW=1000000 FLASHLANE_REQUIRE_GPU=1 timeout 40 $b/backend_cuda $f --test-threads 1 >> $OUT/tests_half.txt 2>&1
  el "backend_cuda $f rc=$?"
done; grep -E "^test .*(ok|FAILED)|test result" $OUT/tests_half.txt | tail -8
S="base:FLASHLANE_AB=1 half264:FLASHLANE_MATMUL_SPLIT_HALF_BELOW=264 halfall:FLASHLANE_MATMUL_SPLIT_HALF_BELOW=1000000"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S" STREAMS=64 ROUNDS=1 timeout 45 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_half.txt
done
