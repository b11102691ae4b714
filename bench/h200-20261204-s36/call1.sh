#!/usr/bin/env bash
# Session 36, call 1: flashlane (608d3d1: the L2 prefetch bound of 16 MiB) against llama.cpp on the
# same random bf16 checkpoints, same run: the A3B slice, Qwen3-0.6B, Qwen3-4B; llama.cpp brought
# prebuilt (bench/pack_llamacpp.sh --cuda-build), so log.txt shows whether it loaded here.
# Carry bench/peers/llama.cpp.tar.xz and bench/peers/flashlane.xz (the default model moved out).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
FLASHLANE=$FL FLASHLANE_COMMIT=608d3d1 timeout 570 bench/gpu_vs_llamacpp.sh /tmp/vs \
  --shapes qwen3-next-a3b-slice,qwen3-0.6b,qwen3-4b --rounds 2 --deadline 470
el "vs rc=$?"
cp /tmp/vs/table.md /tmp/vs/log.txt $OUT/ 2>/dev/null
tar -C /tmp/vs -cJf $OUT/vs_json.tar.xz $(cd /tmp/vs && ls *.json 2>/dev/null) 2>/dev/null
cat $OUT/table.md
