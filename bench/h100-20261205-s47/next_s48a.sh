#!/usr/bin/env bash
# Prepared in session 47 (its device time spent), for the next session's first call:
# 1. `deltanet_recurrence_two` (FLASHLANE_DELTANET_TWO_BLOCKS=1, off by default): the whole
#    recurrence at two blocks a multiprocessor (64 registers a thread, some spilled) for decode
#    steps that do not split, where `deltanet_recurrence` (127 registers) holds one and ncu found
#    86 % of its cycles with no warp ready (session 47, call 6). Its kernel test (bits against
#    the whole and split kernels), the whole-model tests with it on, then A/B on the A3B slice.
# 2. Each kernel's health at one stream (0.6B, 4B, the A3B slice) and 64 (the A3B slice):
#    bench/gpu_profile.sh with HEALTH=1 (DRAM %, occupancy, shared wavefronts a request and bank
#    conflicts, spills): session 47 found the DeltaNet's 4-way bank conflicts this way.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default model moved out
# of the tree for the call); ~400 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 100 $b/backend_cuda deltanet --test-threads 1 > $OUT/tests_two.txt 2>&1
rc=$?; el "backend_cuda deltanet rc=$rc"; grep -E "^test |test result|panicked" $OUT/tests_two.txt
if [ $rc = 0 ]; then
  TESTS="gpu_conformance gpu_target gpu_fixtures" SETTINGS="two:FLASHLANE_DELTANET_TWO_BLOCKS=1" \
    timeout 150 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
  el "tests rc=$?"; cat $OUT/tests/summary.txt
  S="base:FLASHLANE_AB=1 two:FLASHLANE_DELTANET_TWO_BLOCKS=1"
  SETTINGS="$S" STREAMS=8,32,64 NEW_TOKENS=64 ROUNDS=2 timeout 150 bench/gpu_ab.sh /tmp/ab_two qwen3-next-a3b-slice $FL > /dev/null 2>&1
  el "bf16 rc=$?"; cat /tmp/ab_two/ab.txt /tmp/ab_two/ab_means.txt | tee $OUT/ab_two.txt
  SETTINGS="$S" STREAMS=64 NEW_TOKENS=64 ROUNDS=2 timeout 80 bench/gpu_ab.sh /tmp/ab_two8 qwen3-next-a3b-slice-fp8 $FL > /dev/null 2>&1
  el "fp8 rc=$?"; cat /tmp/ab_two8/ab.txt /tmp/ab_two8/ab_means.txt | tee -a $OUT/ab_two.txt
fi
for run in "qwen3-0.6b 1" "qwen3-4b 1" "qwen3-next-a3b-slice 1,64"; do
  set -- $run
  HEALTH=1 NEW_TOKENS=8 timeout 150 bench/gpu_profile.sh $OUT/health $1 $FL $2 > /dev/null 2>&1
  el "health $1 rc=$?"
done
cat $OUT/health/*.txt | head -120
# At most a few files come back: the health dir and the test logs as archives.
tar -C $OUT -cJf $OUT/health.tar.xz health && rm -rf $OUT/health
[ -d $OUT/tests ] && tar -C $OUT -cJf $OUT/tests.tar.xz tests && rm -rf $OUT/tests
