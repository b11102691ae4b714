#!/usr/bin/env bash
# Session 60, call 2. Decode A/Bs of the persistent split (FLASHLANE_MATMUL_STREAM=1: the k splits of
# rounds of up to 64 rows whose x slice fits a block's shared memory — every Qwen3-4B/-8B matrix
# but the down — on one cluster of 8 blocks per ~16 the GPU holds, walking the tiles, x copied once,
# W through one ring; the down, whose slice does not fit, with x through the ring) against the
# defaults, and with x through the ring everywhere (`=ring`): Qwen3-4B at 32, 48, 64 streams and
# -8B at 48, 64; then
# the kernel timelines of Qwen3-4B at 64 streams, default and persistent. Carry
# bench/peers/flashlane.xz (the default model moved out of the tree); limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
S="default:FLASHLANE_AB=1 stream:FLASHLANE_MATMUL_STREAM=1 ring:FLASHLANE_MATMUL_STREAM=ring"
room 170 s4b && ab s4b qwen3-4b 32,48,64 "$S" $FL
room 150 s8b && ab s8b qwen3-8b 48,64 "$S" $FL
TL="tl:FLASHLANE_TIMELINE=1 tlstream:FLASHLANE_TIMELINE=1,FLASHLANE_MATMUL_STREAM=1"
room 90 timeline && {
  ab tl_4b qwen3-4b 64 "$TL" $FL > /dev/null
  for f in /tmp/ab_tl_4b/*.round1.err; do
    { echo "=== $(basename $f)"; sed -n '/kernel timeline/,$p' $f | head -60; } >> $OUT/timeline_64.txt
  done
  el "timeline"
}
