#!/usr/bin/env bash
# Session 65, second call (after next_s65a.sh): the tensor-core attention on the A3B slice (heads
# of 256, 8 key splits; never measured) and on Qwen3-8B at few streams, then the same-run table
# against llama.cpp on Qwen3-4B and -8B at this commit's defaults (issue 12's 1- and 64-stream
# goals; the last one is session 60's). Carry bench/peers/{flashlane.xz,llama.cpp.tar.xz}
# (no tiny model needed); limit 600. COMMIT names the binaries' commit.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
S="default:FLASHLANE_AB=1 mma:FLASHLANE_ATTENTION_MMA=1"
room 110 ab_a3b && ab ab_a3b qwen3-next-a3b-slice 1,8,64 "$S" $FL
room 60 ab_8b && ab ab_8b qwen3-8b 1,8 "$S" $FL
if room 330 table; then
  SHAPES=qwen3-4b,qwen3-8b LIMIT=$(( ${LIMIT:-570} - $(date +%s) + T0 )) COMMIT=${COMMIT:?set COMMIT} \
    bash bench/h100-20261205-s46/call5.sh
  el "table done"
fi
exit 0
