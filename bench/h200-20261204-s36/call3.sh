#!/usr/bin/env bash
# Session 36, call 3: issue 12's 8-bit comparison: the A3B slice in bf16 (again) and flashlane FP8
# (block-scaled dummy weights) against llama.cpp's Q8_0 of the same bf16 GGUF, then the full
# Qwen3-Next-80B-A3B shape in FP8 (flashlane alone: no GGUF of it fits one H200 in bf16).
# Carry bench/peers/llama.cpp.tar.xz and bench/peers/flashlane.xz (the default model moved out).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
FLASHLANE=$FL FLASHLANE_COMMIT=608d3d1 timeout 580 bench/gpu_vs_llamacpp.sh /tmp/vs \
  --shapes qwen3-next-a3b-slice --q8-peer --fp8-only-shapes qwen3-next-80b-a3b-fp8 --rounds 1 --deadline 400
el "vs rc=$?"
cp /tmp/vs/table.md /tmp/vs/log.txt $OUT/ 2>/dev/null
tar -C /tmp/vs -cJf $OUT/vs_json.tar.xz $(cd /tmp/vs && ls *.json 2>/dev/null) 2>/dev/null
cat $OUT/table.md
