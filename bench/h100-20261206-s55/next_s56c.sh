#!/usr/bin/env bash
# Prepared in session 55 (not run); session 56 ordered it by need with a LIMIT (seconds left of
# the call), since failed starts ate that session's device time. After next_s56a.sh's tests
# pass: 1. the one-row MoE paths on the A3B slice at 1 and 2 streams: both off, the direct
# grouping alone, both (FLASHLANE_MOE_GROUP_ONE_ROW, FLASHLANE_MOE_COMBINE_ONE_ROW; keep each
# only where it is not slower). 1b. Session 56's L2 hint on the tiles' weight copies
# (FLASHLANE_MATMUL_EVICT_FIRST=1, off by default) on Qwen3-4B at 1, 32, 64 streams. 2. Where a one-stream token and a 64-stream round go (issue 12's
# profile): the kernel timeline alone at 1 and 64 streams on Qwen3-4B and the A3B slice
# ($OUT/timeline.txt). 3. Attention's key loads: the chosen default (ATT_KV_AHEAD 2 in the
# per-head kernels with heads of at most 128 dims, 1 elsewhere; each variant's PTX measured in
# session 55, not yet together) against the old loads (0) on Qwen3-0.6B (1, 8, 64 streams) and
# Qwen3-4B (1, 8). A part starts only while LIMIT has room for it (~60-90 s each). Carry
# bench/peers/flashlane.xz, the default model moved out of the tree. ~300 s in all.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-300}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
room() { [ $(( $(date +%s) - T0 + $1 )) -le $LIMIT ] || { el "skipped: $2 (no room)"; return 1; }; }
room 80 one_row_a3b &&
  ab one_row_a3b qwen3-next-a3b-slice 1,2 "old:FLASHLANE_MOE_GROUP_ONE_ROW=0,FLASHLANE_MOE_COMBINE_ONE_ROW=0 group:FLASHLANE_MOE_COMBINE_ONE_ROW=0 both:FLASHLANE_AB=1" $FL
timeline() {
  ab tl_$1 $1 1,64 "tl:FLASHLANE_TIMELINE=1" $FL > /dev/null
  for f in /tmp/ab_tl_$1/*.tl.round1.err; do
    { echo "=== $1 $(basename $f)"; sed -n '/kernel timeline/,$p' $f; } >> $OUT/timeline.txt
  done
  el "timeline $1"
}
room 90 evict_4b &&
  ab evict_4b qwen3-4b 1,32,64 "default:FLASHLANE_AB=1 evict:FLASHLANE_MATMUL_EVICT_FIRST=1" $FL
room 70 timeline_4b && timeline qwen3-4b
room 60 timeline_a3b && timeline qwen3-next-a3b-slice
KV="old:FLASHLANE_ATTENTION_KV_AHEAD=0 default:FLASHLANE_AB=1"
room 80 kv_06b && ab kv_06b qwen3-0.6b 1,8,64 "$KV" $FL
room 60 kv_4b && ab kv_4b qwen3-4b 1,8 "$KV" $FL
