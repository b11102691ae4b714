#!/usr/bin/env bash
# Prepared in session 46: the same-run table against llama.cpp on the shapes session 46's call 5
# left out, at HEAD's defaults: Qwen3-8B (bf16, and FP8 against llama.cpp's Q8_0 of the same
# bf16 weights) and the A3B slice (the same two; its FP8 twin now splits k in decode rounds of
# 17-64 streams). Set COMMIT to the packed binary's commit. Carry bench/peers/flashlane.xz and
# bench/peers/llama.cpp.tar.xz (bench/pack_llamacpp.sh --cuda-build; the default model moved
# out of the tree). ~400 s.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
left=${LIMIT:-540}
FLASHLANE=$FL FLASHLANE_COMMIT=${COMMIT:?set COMMIT} timeout $left bench/gpu_vs_llamacpp.sh /tmp/vs \
  --shapes ${SHAPES:-qwen3-next-a3b-slice,qwen3-8b} --q8-peer --rounds 2 --deadline $(( left - 150 ))
el "vs rc=$?"
cp /tmp/vs/table.md /tmp/vs/log.txt $OUT/ 2>/dev/null
tar -C /tmp/vs -cJf $OUT/vs_json.tar.xz $(cd /tmp/vs && ls *.json 2>/dev/null) 2>/dev/null
cat $OUT/table.md
