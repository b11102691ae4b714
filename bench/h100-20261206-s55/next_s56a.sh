#!/usr/bin/env bash
# Prepared in session 55 (not run; its call 4 found no device time left). Attention's key loads at
# the default chosen from session 55's A/B (ATT_KV_AHEAD 2 in the per-head kernels with heads of
# at most 128 dims, 1 in the grouped kernels and with heads of 256): 1. the test that compiles
# ATT_KV_AHEAD 0 (and 1 where heads are at most 128 dims) and compares every attention kernel's
# bits with the default's (it ran out of its 200 s in session 55 with 24 compiles; now 7), with
# the other attention kernel tests; 2. the five whole-model GPU test binaries (alone = batched =
# moved = with drafts, bit for bit) at that default; 3. the A/B of the default against the old
# loads (0) on Qwen3-0.6B and Qwen3-4B (the grouped kernels' PTX is 1's, the per-head kernels'
# 2's, each measured in session 55, not yet together). The MoE kernel tests and the norm twins'
# run too: session 55 removed the experts' sum in `moe_down` and the routing in the front
# projection (off, measured slower; `moe_down`'s arguments changed, `moe_route`'s PTX reordered).
# Then the A/B of session 55's one-row MoE paths (not yet run; their kernel tests run above):
# `moe_route_group`'s direct grouping (FLASHLANE_MOE_GROUP_ONE_ROW) and `moe_combine_norm`'s
# places without loads (FLASHLANE_MOE_COMBINE_ONE_ROW), on the A3B slice at 1 and 2 streams.
# ~580 s. Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the default model moved out of the
# tree.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s56a 240 attention prep_in_attention moe_ norm_twins one_row_grouping
TESTS="gpu_target gpu_conformance gpu_dense gpu_fixtures gpu_faults" TEST_TIMEOUT=120 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; tee $OUT/tests_summary.txt < /tmp/tests/summary.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
KV="old:FLASHLANE_ATTENTION_KV_AHEAD=0 default:FLASHLANE_AB=1"
ab kv_06b qwen3-0.6b 1,8,64 "$KV" $FL
ab kv_4b qwen3-4b 1,8 "$KV" $FL
ab one_row_a3b qwen3-next-a3b-slice 1,2 "old:FLASHLANE_MOE_GROUP_ONE_ROW=0,FLASHLANE_MOE_COMBINE_ONE_ROW=0 group:FLASHLANE_MOE_COMBINE_ONE_ROW=0 both:FLASHLANE_AB=1" $FL
