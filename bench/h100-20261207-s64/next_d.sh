#!/usr/bin/env bash
# Session 64, fourth call (after the first three's A/Bs, bench/RESULTS.md "Session 64"): the
# tensor-core attention's fixed cost cut, where it lost (1 and 8 streams: its one-row launch
# took 10.5 µs against 4.6 for attention_gated_prep):
# - the merge's m and l read all at once (they were read one after another: 16 round trips to
#   distributed shared memory);
# - the prep twin preps the group's query heads in every block (no cluster barrier, no global
#   round trip of q) and the KV head in the block whose split reads the row's own key, its
#   walk's first tiles copied meanwhile;
# - the last cluster barrier split around the output's stores.
# Its kernel tests (bits against backend-cpu, the prep twin against the prep apart), then its A/B
# at 1, 8, 32, 64 streams on Qwen3-4B and 1, 8 on -0.6B, timelines at 1 and 8; `=waves` at 1, 8,
# 16 streams (the default folds no round of up to 32 rows; =waves won 2 % and 8 % at 32).
# On an H200 the whole-model tests last, where there is room.
set -u
. bench/device_ab.sh
gpu_info
h200=0; grep -q H200 $OUT/gpu.txt && h200=1
TEST_THREADS=4 kernel_tests mma 200 attention_of prep_in_attention_gives
if grep -q "test result: ok. 4 passed" $OUT/tests_mma.txt; then
  S="default:FLASHLANE_AB=1 mma:FLASHLANE_ATTENTION_MMA=1"
  room 90 ab_4b && ab ab_4b qwen3-4b 1,8,32,64 "$S" $FL
  room 50 ab_06b && ab ab_06b qwen3-0.6b 1,8 "$S" $FL
  TL="tl:FLASHLANE_TIMELINE=1 tlmma:FLASHLANE_TIMELINE=1,FLASHLANE_ATTENTION_MMA=1"
fi
W="default:FLASHLANE_AB=1 waves:FLASHLANE_MATMUL_CLUSTER_FOLD=waves"
room 70 ab_waves_4b && ab ab_waves_4b qwen3-4b 1,8,16 "$W" $FL
room 80 ab_waves_8b && ab ab_waves_8b qwen3-8b 1,8,16 "$W" $FL
if grep -q "test result: ok. 4 passed" $OUT/tests_mma.txt; then
  room 50 timeline1 && timeline 1 qwen3-4b 1 "$TL" $FL
  room 50 timeline8 && timeline 8 qwen3-4b 8 "$TL" $FL
  # The A3B slice: heads of 256 (8 splits), 3 attention layers of 12.
  room 70 ab_a3b && ab ab_a3b qwen3-next-a3b-slice 1,32 "$S" $FL
fi
[ $h200 = 1 ] && room 200 tests && whole_model_tests
exit 0
