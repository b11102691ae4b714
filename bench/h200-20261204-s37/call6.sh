#!/usr/bin/env bash
# Session 37, call 6 (the session's last ~300 device-seconds): the k split of 17-32-row rounds on
# 32-row blocks (matmul_bf16_tiled_split32, FLASHLANE_MATMUL_SPLIT32=1; off by default). The
# matmul kernel test (it runs beside every other kernel, bit for bit), then Qwen3-4B and -8B at
# 24 and 32 streams, two rounds, against the default (the 16-row kernels there).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 40 $b/backend_cuda matmul_matches_backend --test-threads 1 > $OUT/tests_split32.txt 2>&1
el "backend_cuda matmul_matches_backend rc=$?"
grep -E "^test .*(ok|FAILED)|test result|panicked" $OUT/tests_split32.txt | tail -4
S="base:FLASHLANE_AB=1 s32:FLASHLANE_MATMUL_SPLIT32=1"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S" STREAMS=24,32 ROUNDS=2 timeout 80 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_split32.txt
done
