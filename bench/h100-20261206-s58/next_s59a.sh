#!/usr/bin/env bash
# Prepared in session 58 (not run). 1. The matmul kernel test with the cluster fold, its log
# keeping how many of the fold's clusters the GPU runs at once (--nocapture). 2. The five
# whole-model GPU test binaries at the new defaults (the 8-warp staged attention now takes the
# grouped attention's calls where a block holds 4 query heads: Qwen3-4B, -8B and the dense
# fixtures of that shape). 3. The kernel timeline at 64 streams of Qwen3-4B and -8B, with and
# without FLASHLANE_MATMUL_CLUSTER_FOLD=1 (4B 1.089× with it, 8B 0.985–0.993×: which launches
# gain and which lose decides a rule). ~450 s. Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the default model moved out of the
# tree; limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-560}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s59a_matmul 150 matmul_matches_backend_cpu_gathers --nocapture
grep -E "clusters of" $OUT/tests_s59a_matmul.txt
TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults" TEST_TIMEOUT=150 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
TL="tl:FLASHLANE_TIMELINE=1 tlfold:FLASHLANE_TIMELINE=1,FLASHLANE_MATMUL_CLUSTER_FOLD=1"
for shape in qwen3-4b qwen3-8b; do
  room 110 timeline_$shape || continue
  ab tl_$shape $shape 64 "$TL" $FL > /dev/null
  for f in /tmp/ab_tl_$shape/*.round1.err; do
    { echo "=== $(basename $f)"; sed -n '/kernel timeline/,$p' $f; } >> $OUT/timeline.txt
  done
  el "timeline $shape"
done
