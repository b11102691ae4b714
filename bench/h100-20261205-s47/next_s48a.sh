#!/usr/bin/env bash
# Prepared in session 47 (its device time spent), for the next session's first call. Two A/B
# switches, off by default, never run on a GPU:
# - `deltanet_recurrence_two` (FLASHLANE_DELTANET_TWO_BLOCKS=1): the whole recurrence at two
#   blocks a multiprocessor (64 registers a thread, some spilled) for decode steps that do not
#   split, where `deltanet_recurrence` (127 registers) holds one and ncu found 86 % of its
#   cycles with no warp ready (session 47, call 6).
# - the 16-row matmuls' warp partials value-major in shared memory (FLASHLANE_MATMUL_PART_T=1):
#   as declared, every store and load of the block's final sum meets 4-way bank conflicts.
# Their kernel tests (bits against the kernels as built), the whole-model tests with both on,
# then A/B of each. Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default
# model moved out of the tree for the call); ~450 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
ok=1
for t in deltanet partials_value_major; do
  FLASHLANE_REQUIRE_GPU=1 timeout 100 $b/backend_cuda $t --test-threads 1 >> $OUT/tests_kernels.txt 2>&1
  rc=$?; el "backend_cuda $t rc=$rc"; [ $rc = 0 ] || ok=0
done
grep -E "^test |test result|panicked" $OUT/tests_kernels.txt
[ $ok = 1 ] || exit 1
TESTS="gpu_conformance gpu_target gpu_fixtures" \
  SETTINGS="both:FLASHLANE_DELTANET_TWO_BLOCKS=1,FLASHLANE_MATMUL_PART_T=1" \
  timeout 170 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests/summary.txt
tar -C $OUT -cJf $OUT/tests.tar.xz tests && rm -rf $OUT/tests
S="base:FLASHLANE_AB=1 two:FLASHLANE_DELTANET_TWO_BLOCKS=1"
SETTINGS="$S" STREAMS=8,32,64 NEW_TOKENS=64 ROUNDS=2 timeout 150 bench/gpu_ab.sh /tmp/ab_two qwen3-next-a3b-slice $FL > /dev/null 2>&1
el "two-blocks rc=$?"; cat /tmp/ab_two/ab.txt /tmp/ab_two/ab_means.txt | tee $OUT/ab_two.txt
S="base:FLASHLANE_AB=1 partt:FLASHLANE_MATMUL_PART_T=1"
for run in "qwen3-0.6b 1,8" "qwen3-next-a3b-slice 1,8" "qwen3-4b 1"; do
  set -- $run
  SETTINGS="$S" STREAMS=$2 NEW_TOKENS=64 ROUNDS=2 timeout 100 bench/gpu_ab.sh /tmp/ab_pt_$1 $1 $FL > /dev/null 2>&1
  el "part_t $1 rc=$?"; cat /tmp/ab_pt_$1/ab.txt /tmp/ab_pt_$1/ab_means.txt | tee -a $OUT/ab_part_t.txt
done
