#!/usr/bin/env bash
# Prepared in session 47, for the call after next_s48a.sh (the same packs): each kernel's health
# at one stream (Qwen3-0.6B, -4B, the A3B slice) and 64 (the A3B slice): bench/gpu_profile.sh
# with HEALTH=1 (DRAM %, occupancy, shared wavefronts a request and bank conflicts, spills),
# which session 47 found the DeltaNet's 4-way bank conflicts by, one kernel at a time.
# Carry bench/peers/flashlane.xz; ~200 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
for run in "qwen3-0.6b 1" "qwen3-4b 1,64" "qwen3-next-a3b-slice 1,64"; do
  set -- $run
  HEALTH=1 NEW_TOKENS=8 timeout 150 bench/gpu_profile.sh $OUT/health $1 $FL $2 > /dev/null 2>&1
  el "health $1 rc=$?"
done
cat $OUT/health/*.txt | head -120
# At most a few files come back: the health dir as one archive.
tar -C $OUT -cJf $OUT/health.tar.xz health && rm -rf $OUT/health
