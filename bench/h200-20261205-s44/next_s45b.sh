#!/usr/bin/env bash
# Prepared in session 44: the same-run table against llama.cpp at session 44's defaults, on the
# shapes they touch: Qwen3-4B and -8B in bf16, and their FP8 twins against llama.cpp's Q8_0 of
# the same bf16 weights (--q8-peer); Qwen3-0.6B (the early weight loads). Set COMMIT to the
# packed binary's commit. Carry bench/peers/llama.cpp.tar.xz (bench/pack_llamacpp.sh
# --cuda-build) and bench/peers/flashlane.xz (the default model moved out).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
FLASHLANE=$FL FLASHLANE_COMMIT=${COMMIT:?set COMMIT} timeout 570 bench/gpu_vs_llamacpp.sh /tmp/vs \
  --shapes ${SHAPES:-qwen3-4b,qwen3-8b,qwen3-0.6b} --q8-peer --rounds 2 --deadline 470
el "vs rc=$?"
cp /tmp/vs/table.md /tmp/vs/log.txt $OUT/ 2>/dev/null
tar -C /tmp/vs -cJf $OUT/vs_json.tar.xz $(cd /tmp/vs && ls *.json 2>/dev/null) 2>/dev/null
cat $OUT/table.md
