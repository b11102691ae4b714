#!/usr/bin/env bash
# Prepared in session 56 (not run). 1. The other four whole-model GPU test binaries at the
# packs' commit (session 56 ran all five on the H200 at `dceb1b4`, before the one-row MoE paths
# were removed). 2. A/Bs, each only while LIMIT has room: `attention_grouped_few` for decode
# rounds of 32+ streams (FLASHLANE_ATTENTION_FEW_WARPS=1: 4 warps a block, the same bits; the
# grouped kernel's 102 registers at 512 threads hold one block a multiprocessor, and attention
# was 20 % of Qwen3-4B's 64-stream round on the H200) on Qwen3-4B and -0.6B at 32 and 64; the
# tiles' L2 hint (FLASHLANE_MATMUL_EVICT_FIRST=1) on Qwen3-4B at 1, 32, 64 (prefill too); the
# norm in the split of x (FLASHLANE_NORM_IN_SPLIT=1: one launch fewer a norm) on Qwen3-4B at
# 32, 64;
# 3. the A3B slice's kernel timeline at 1 and 64 streams on the H200. Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the model moved out; ~560 s.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-560}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
room() { [ $(( $(date +%s) - T0 + $1 )) -le $LIMIT ] || { el "skipped: $2 (no room)"; return 1; }; }
TESTS="gpu_conformance gpu_dense gpu_fixtures gpu_faults" TEST_TIMEOUT=100 \
  bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; tee $OUT/tests_summary_b.txt < /tmp/tests/summary.txt
tar -C /tmp/tests -cJf $OUT/tests_logs_b.tar.xz .
FEW="default:FLASHLANE_AB=1 few:FLASHLANE_ATTENTION_FEW_WARPS=1"
room 90 few_4b && ab few_4b qwen3-4b 32,64 "$FEW" $FL
room 90 evict_4b && ab evict_4b qwen3-4b 1,32,64 "default:FLASHLANE_AB=1 evict:FLASHLANE_MATMUL_EVICT_FIRST=1" $FL
room 60 few_06b && ab few_06b qwen3-0.6b 32,64 "$FEW" $FL
room 90 split_norm_4b && ab split_norm_4b qwen3-4b 32,64 "default:FLASHLANE_AB=1 split_norm:FLASHLANE_NORM_IN_SPLIT=1" $FL
if room 60 timeline_a3b; then
  ab tl_a3b qwen3-next-a3b-slice 1,64 "tl:FLASHLANE_TIMELINE=1" $FL > /dev/null
  for f in /tmp/ab_tl_a3b/*.tl.round1.err; do
    { echo "=== a3b $(basename $f)"; sed -n '/kernel timeline/,$p' $f; } >> $OUT/timeline.txt
  done
  el "timeline a3b"
fi
