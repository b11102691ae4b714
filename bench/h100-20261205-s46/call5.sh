#!/usr/bin/env bash
# Session 46, call 5, right after call 4 on the same machine (binaries at COMMIT): the same-run
# table against llama.cpp at this session's defaults: Qwen3-4B (bf16, and FP8 against
# llama.cpp's Q8_0 of the same bf16 weights) and Qwen3-0.6B. LIMIT: the seconds left.
# Carry bench/peers/{flashlane.xz,llama.cpp.tar.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
left=${LIMIT:-400}
FLASHLANE=$FL FLASHLANE_COMMIT=${COMMIT:?set COMMIT} timeout $left bench/gpu_vs_llamacpp.sh /tmp/vs \
  --shapes ${SHAPES:-qwen3-4b,qwen3-0.6b} --q8-peer --rounds 2 --deadline $(( left - 130 ))
el "vs rc=$?"
cp /tmp/vs/table.md /tmp/vs/log.txt $OUT/ 2>/dev/null
tar -C /tmp/vs -cJf $OUT/vs_json.tar.xz $(cd /tmp/vs && ls *.json 2>/dev/null) 2>/dev/null
cat $OUT/table.md
