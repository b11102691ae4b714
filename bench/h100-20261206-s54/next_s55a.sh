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
# prepared this; the default model moved out of the tree). ~480 s on an H100; call limit 600.
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
for shape in qwen3-0.6b qwen3-next-a3b-slice qwen3-4b; do
  ab tl_$shape $shape 1,8 "$TL" $FL
  for f in /tmp/ab_tl_$shape/*.tl.round*.err; do
    { echo "=== $shape $(basename $f)"; sed -n '/kernel timeline/,$p' $f; } >> $OUT/timeline.txt
  done
  el "timeline $shape"
done
