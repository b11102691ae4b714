#!/usr/bin/env bash
# Session 24, call 3 (the device time left): the final binary. The restored first warpgroup
# version's kernel test; its default (from 4,096 rows in Qwen3-4B and -8B) against the tiles
# (FLASHLANE_MATMUL_WGMMA=0) at 32 and 64 streams; then every GPU test with it forced on from 128
# rows. Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz}, the model moved out.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
timeout 60 $B/backend_cuda wgmma --test-threads 1 > $OUT/wgmma_test.txt 2>&1
echo "wgmma test rc=$? at $(el) s"; grep -E "test result" $OUT/wgmma_test.txt
for s in qwen3-4b qwen3-8b; do
  SETTINGS="tiles:FLASHLANE_MATMUL_WGMMA=0 default:FLASHLANE_AB=1" ROUNDS=1 STREAMS=32,64 timeout 60 \
    bench/gpu_ab.sh /tmp/ab-$s $s $FL > /dev/null 2>&1
  { echo "== $s"; cat /tmp/ab-$s/ab.txt; } | tee -a $OUT/ab.txt
done
echo "A/B done at $(el) s"
SETTINGS="wgmma:FLASHLANE_MATMUL_WGMMA=1" TESTS_SECONDS=$((270 - $(el))) timeout $((272 - $(el))) \
  bench/gpu_session.sh $OUT/session
echo "total $(el) s"
