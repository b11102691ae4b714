#!/usr/bin/env bash
# Session 25, call 5. Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz} with the
# default model moved out of the tree. The k split folded inside clusters
# (`matmul_bf16_tiled_cluster`): its bits against every other matmul kernel (the matmul tests),
# its kernel times against the split with partials (tiled_define_times, as built), the A/B of
# FLASHLANE_MATMUL_CLUSTER_FOLD on the Qwen3-8B and -4B shapes at 48 and 64 streams, and the
# dense and target GPU tests with the k split forced on (FLASHLANE_MATMUL_SPLIT_K=1: their small
# models do not split by themselves) so that the cluster fold runs end to end.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
FLASHLANE_REQUIRE_GPU=1 timeout 80 $B/backend_cuda matmul --test-threads 2 > $OUT/matmul_tests.txt 2>&1
echo "matmul tests rc=$? at $(el) s"; grep -E "test result|panicked|differs" $OUT/matmul_tests.txt | head -5
FLASHLANE_TIMES_VARIANT="as built" timeout 30 $B/backend_cuda --ignored tiled_define_times --nocapture --test-threads 1 > $OUT/tiled_times.txt 2>&1
echo "times rc=$? at $(el) s"; grep -E "gate_up|down" $OUT/tiled_times.txt | sed -E 's/ +/ /g; s/tiled@4096.*//'
ab() {
  SETTINGS="cluster:FLASHLANE_AB=1 partials:FLASHLANE_MATMUL_CLUSTER_FOLD=0" ROUNDS=1 STREAMS=48,64 NEW_TOKENS=64 \
    timeout $2 bench/gpu_ab.sh /tmp/ab-$1 $1 $FL > /dev/null 2>&1
  echo "A/B $1 rc=$? at $(el) s"; { echo "== $1"; cat /tmp/ab-$1/ab.txt; } | tee -a $OUT/ab.txt
}
ab qwen3-8b 70
for t in gpu_dense gpu_target; do
  FLASHLANE_REQUIRE_GPU=1 FLASHLANE_MATMUL_SPLIT_K=1 timeout 35 $B/$t --test-threads 1 > $OUT/$t.txt 2>&1
  echo "$t (split k on) rc=$? at $(el) s"; grep -E "test result|panicked" $OUT/$t.txt | head -3
done
ab qwen3-4b 60
echo "total $(el) s"
