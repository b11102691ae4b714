#!/usr/bin/env bash
# Session 47, call 7: the DeltaNet stage's q and k padded in shared memory (a word after each
# lane group's rows: no bank conflicts in the token loop; the same bits). The recurrence's
# kernel tests, the whole-model tests, then old (202a8a7 + the split switch) against new on the
# A3B slice at 1, 8 and 64 streams. Carry bench/peers/{flashlane.xz,flashlane_old.xz} for the
# A/B (PART=ab), bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} for the tests
# (PART=tests): both do not fit one call's 64 MiB.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
if [ "${PART:?PART=ab or tests}" = tests ]; then
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 100 $b/backend_cuda deltanet --test-threads 1 > $OUT/tests_pad.txt 2>&1
el "backend_cuda deltanet rc=$?"; grep -E "^test |test result" $OUT/tests_pad.txt
TESTS="gpu_conformance gpu_target gpu_fixtures" SETTINGS="base:FLASHLANE_AB=1" \
  timeout 120 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
el "tests rc=$?"; cat $OUT/tests/summary.txt
exit 0
fi
xz -dc bench/peers/flashlane_old.xz > /tmp/fl_old && chmod +x /tmp/fl_old
STREAMS=1,8,64 NEW_TOKENS=64 ROUNDS=2 timeout 200 bench/gpu_ab.sh /tmp/ab_pad qwen3-next-a3b-slice /tmp/fl_old $FL > /dev/null 2>&1
el "bf16 rc=$?"; cat /tmp/ab_pad/ab.txt /tmp/ab_pad/ab_means.txt | tee $OUT/ab_pad.txt
