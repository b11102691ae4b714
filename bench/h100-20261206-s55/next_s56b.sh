#!/usr/bin/env bash
# Prepared in session 55 (not run). After next_s56a.sh: the same-run table against llama.cpp on
# Qwen3-0.6B, the A3B slice and Qwen3-4B (bench/h100-20261205-s46/call5.sh, ~400 s), then where a
# one-stream token and a 64-stream round go at these defaults (issue 12's profile): the kernel
# timeline alone at 1 and 64 streams on Qwen3-4B and the A3B slice (its summaries to
# $OUT/timeline.txt). COMMIT names the binaries' commit. Carry bench/peers/{flashlane.xz,
# llama.cpp.tar.xz}. ~560 s; call limit 600.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
SHAPES=qwen3-0.6b,qwen3-next-a3b-slice,qwen3-4b LIMIT=${LIMIT:-420} COMMIT=${COMMIT:?set COMMIT} \
  bash bench/h100-20261205-s46/call5.sh
el "table done"
timeline() {
  ab tl_$1 $1 1,64 "tl:FLASHLANE_TIMELINE=1" $FL > /dev/null
  for f in /tmp/ab_tl_$1/*.tl.round1.err; do
    { echo "=== $1 $(basename $f)"; sed -n '/kernel timeline/,$p' $f; } >> $OUT/timeline.txt
  done
  el "timeline $1"
}
timeline qwen3-4b
timeline qwen3-next-a3b-slice
