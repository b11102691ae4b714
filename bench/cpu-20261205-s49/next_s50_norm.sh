#!/usr/bin/env bash
# Prepared in session 49 (no device lent), never run on a GPU: the input RMSNorm in the 16-row bf16
# matmuls (`matmul_bf16_norm_*`, `matmul_bf16_swiglu_norm_*`), off by default
# (FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=N takes it for rounds of up to N rows). Session 32's twins
# lost 6 % at one stream; these load their first weights before they sum the squares and load a
# row's squares in one batch. Its kernel tests (the twins' bits against rmsnorm_rows then the
# plain kernel, every 16-row kernel, 1–40 rows), the whole-model tests with every round of up to 4
# rows through the twins, then the A/B on Qwen3-0.6B and -4B at 1, 2 and 8 streams (a dense
# layer's two norms a step are 57 of Qwen3-0.6B's 228 launches), and on Qwen3-0.6B the narrow
# kernel four chunks deep (FLASHLANE_MATMUL_NARROW_DEPTH=4).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default model moved out of
# the tree for the call); ~450 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 150 $b/backend_cuda norm --test-threads 1 > $OUT/tests_kernels.txt 2>&1
rc=$?; el "backend_cuda norm rc=$rc"; grep -E "^test |test result|panicked" $OUT/tests_kernels.txt
# Packs older than e3ea569 have no such test and ignore the switch: nothing below would test it.
grep -q "norm_twins_give_the_bits" $OUT/tests_kernels.txt || { el "stale packs: repack (bench/pack_gpu_tests.sh --flashlane)"; exit 1; }
# The tiny model the kernel tests compile for is hybrid (no early weights): the dense models' path,
# the wait inside the twin after its first weight loads, too.
FLASHLANE_MATMUL_EARLY_WEIGHTS=1 FLASHLANE_REQUIRE_GPU=1 timeout 150 $b/backend_cuda norm_twins --test-threads 1 \
  > $OUT/tests_kernels_early.txt 2>&1
rc2=$?; el "backend_cuda norm_twins (early weights) rc=$rc2"; grep -E "^test |test result|panicked" $OUT/tests_kernels_early.txt
[ $rc2 = 0 ] || rc=$rc2
# The narrow kernel four chunks deep (the A/B's d4 below): the matmul test's bits at that depth.
FLASHLANE_MATMUL_NARROW_DEPTH=4 FLASHLANE_REQUIRE_GPU=1 timeout 150 $b/backend_cuda matmul_matches_backend_cpu \
  --test-threads 1 > $OUT/tests_kernels_d4.txt 2>&1
rc3=$?; el "backend_cuda matmul (narrow depth 4) rc=$rc3"; grep -E "^test |test result|panicked" $OUT/tests_kernels_d4.txt
[ $rc3 = 0 ] || rc=$rc3
if [ $rc = 0 ]; then
  TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures" SETTINGS="n4:FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=4" \
    TEST_TIMEOUT=100 bench/gpu_tests.sh $OUT/tests_n4 > /dev/null 2>&1
  el "tests n4 rc=$?"; cat $OUT/tests_n4/summary.txt
  S="base:FLASHLANE_AB=1 n1:FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=1 n2:FLASHLANE_NORM_IN_MATMUL_MAX_ROWS=2"
  for shape in qwen3-0.6b qwen3-4b; do
    # Qwen3-0.6B also with its narrow o and down projections (128 blocks, one a multiprocessor)
    # four chunks deep (FLASHLANE_MATMUL_NARROW_DEPTH=4, one block a multiprocessor's registers).
    extra=""; [ $shape = qwen3-0.6b ] && extra=" d4:FLASHLANE_MATMUL_NARROW_DEPTH=4"
    SETTINGS="$S$extra" STREAMS=1,2,8 NEW_TOKENS=64 ROUNDS=2 RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
    el "norm $shape rc=$?"; cat /tmp/ab_$shape/ab.txt /tmp/ab_$shape/ab_means.txt | tee -a $OUT/ab_norm.txt
  done
  tar -C $OUT -cJf $OUT/tests.tar.xz tests_n4 && rm -rf $OUT/tests_n4
fi
