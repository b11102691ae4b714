#!/usr/bin/env bash
# Session 29, call 3: with CHAIN=1, session 28's s28b.sh first (the chain head trained for the
# trunk carried as tiny_model.xz, then every GPU test and MTP's speed-up on the final file; its
# seven files into $OUT); then, for issue 12, what programmatic dependent launch does to
# Qwen3-0.6B's many-stream rounds (never measured on that shape: session 13 measured the A3B
# slice, where it cost ~2 % at 32 streams) and where a 64-stream round of it goes (ncu).
# Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz}, the default model moved out.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
[ "${CHAIN:-1}" = 1 ] && { bash bench/h200-20261203-s28/s28b.sh; el "s28b.sh rc=$?"; }
ROUNDS=${ROUNDS:-2} STREAMS=32,64 SETTINGS="pdl:FLASHLANE_AB=1 nopdl:FLASHLANE_PDL=0" \
    bench/gpu_ab.sh /tmp/ab qwen3-0.6b "$FL" > /dev/null 2>&1
el "ab"; cat /tmp/ab/ab.txt
NEW_TOKENS=8 timeout ${PROF_S:-150} bench/gpu_profile.sh /tmp/prof qwen3-0.6b "$FL" 64 > /tmp/prof.log 2>&1
el "profile rc=$?"; tail -30 /tmp/prof.log
tar -C /tmp -cJf $OUT/ab_prof.tar.xz ab prof prof.log
ls -l $OUT
