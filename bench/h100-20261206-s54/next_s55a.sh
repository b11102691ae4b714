#!/usr/bin/env bash
# Prepared in session 54 (not run). 1. The five whole-model GPU test binaries (alone = batched =
# moved = with drafts, bit for bit) at the code after session 54 removed the swap ring and the
# split layouts (every kernel's PTX is 4357db1's again: tools/cuda_check --compare), then the
# swapped chain's and the matmul's kernel tests (the swapped-chain test now also runs last chunks
# of 16-48 elements and gathered rows on the register kernels). 2. The kernel timeline
# (FLASHLANE_TIMELINE=1, crates/backend-cuda/src/timeline.rs; never run on a GPU before): where
# a replayed round's time goes launch by launch on Qwen3-0.6B, the A3B slice and Qwen3-4B at 1
# and 8 streams, beside the same binary without it (what the probe costs). The summaries (per
# round size: each kernel's us from its wait's return to the next launch's, launches and blocks a
# round, block 0's wait, how often it did not wait) go to $OUT/timeline.txt; "left out" rounds
# say the stamps did not match the launches (a kernel whose block 0 does not wait once).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (packed at the commit that
# prepared this; the default model moved out of the tree). ~520 s on an H100; call limit 600.
# Then MTP's GPU speed-up with the new default model (between the shapes: the 4B timeline last).
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
TESTS="gpu_target gpu_conformance gpu_dense gpu_fixtures gpu_faults" TEST_TIMEOUT=120 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
kernel_tests s55a 120 swapped matmul_matches_backend_cpu_gathers
TL="base:FLASHLANE_AB=1 tl:FLASHLANE_TIMELINE=1"
timeline() {
  ab tl_$1 $1 1,8 "$TL" $FL
  for f in /tmp/ab_tl_$1/*.tl.round*.err; do
    { echo "=== $1 $(basename $f)"; sed -n '/kernel timeline/,$p' $f; } >> $OUT/timeline.txt
  done
  el "timeline $1"
}
timeline qwen3-0.6b
timeline qwen3-next-a3b-slice
# MTP's GPU speed-up with the default model shipped in session 54 (its head is session 29's, as
# before: 2.00x / 1.89x at 1 / 8 streams in session 53).
TASKS=counting DRAFTS="none mtp:3" REPS=1 BENCH_ARGS="--device cuda" FLASHLANE=$FL \
  timeout 90 bench/mtp_speedup.sh /tmp/mtp > $OUT/mtp_speedup.txt 2>&1
el "MTP rc=$?"; tail -6 $OUT/mtp_speedup.txt
timeline qwen3-4b
