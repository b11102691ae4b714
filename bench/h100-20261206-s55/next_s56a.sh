#!/usr/bin/env bash
# Prepared in session 55 (not run; its call 4 found no device time left). Attention's key loads at
# the default chosen from session 55's A/B (ATT_KV_AHEAD 2 in the per-head kernels with heads of
# at most 128 dims, 1 in the grouped kernels and with heads of 256): 1. the test that compiles
# ATT_KV_AHEAD 0 (and 1 where heads are at most 128 dims) and compares every attention kernel's
# bits with the default's (it ran out of its 200 s in session 55 with 24 compiles; now 7), with
# the other attention kernel tests; 2. the five whole-model GPU test binaries (alone = batched =
# moved = with drafts, bit for bit) at that default; 3. the A/B of the default against the old
# loads (0) on Qwen3-0.6B and Qwen3-4B (the grouped kernels' PTX is 1's, the per-head kernels'
# 2's, each measured in session 55, not yet together); 4. the kernel timeline at 1 and 64
# streams on the three shapes. ~540 s. Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,
# tiny_model.xz}, the default model moved out of the tree.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s56a 150 attention prep_in_attention
TESTS="gpu_target gpu_conformance gpu_dense gpu_fixtures gpu_faults" TEST_TIMEOUT=120 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
KV="old:FLASHLANE_ATTENTION_KV_AHEAD=0 default:FLASHLANE_AB=1"
ab kv_06b qwen3-0.6b 1,8,64 "$KV" $FL
ab kv_4b qwen3-4b 1,8,64 "$KV" $FL
# Where a one-stream token and a 64-stream round go at these defaults (issue 12's profile): the
# kernel timeline alone (one variant, its summaries to $OUT/timeline.txt).
timeline() {
  ab tl_$1 $1 1,64 "tl:FLASHLANE_TIMELINE=1" $FL > /dev/null
  for f in /tmp/ab_tl_$1/*.tl.round1.err; do
    { echo "=== $1 $(basename $f)"; sed -n '/kernel timeline/,$p' $f; } >> $OUT/timeline.txt
  done
  el "timeline $1"
}
timeline qwen3-4b
timeline qwen3-next-a3b-slice
timeline qwen3-0.6b
