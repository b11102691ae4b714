#!/usr/bin/env bash
# Prepared in session 37: issue 12's profiles at the current defaults (the last ones: session 30
# for Qwen3-0.6B's one-stream token and the A3B slice's 1- and 64-stream rounds, session 31 for a
# Qwen3-4B 64-stream round), where a 1-stream token and a 64-stream round go (bench/gpu_profile.sh,
# ncu, graphs off, dummy weights). Run it after next_s38a/b have settled the defaults.
# Carry bench/peers/flashlane.xz.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
NEW_TOKENS=12 RUN_TIMEOUT=150 bench/gpu_profile.sh /tmp/prof qwen3-next-a3b-slice $FL 1,64 > /dev/null 2>&1
el "a3b profile rc=$?"
NEW_TOKENS=12 RUN_TIMEOUT=120 bench/gpu_profile.sh /tmp/prof qwen3-0.6b $FL 1 > /dev/null 2>&1
el "0.6b profile rc=$?"
NEW_TOKENS=8 RUN_TIMEOUT=150 bench/gpu_profile.sh /tmp/prof qwen3-4b $FL 1,64 > /dev/null 2>&1
el "4b profile rc=$?"
cp /tmp/prof/*.txt $OUT/ 2>/dev/null
tar -C /tmp -cJf $OUT/prof_csv.tar.xz prof
