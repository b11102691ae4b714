#!/usr/bin/env bash
# Session 36, call 2: Qwen3-8B against llama.cpp, same run (as call 1), then the L2 prefetch bound
# (16 MiB, the default) against prefetching every matrix on the FP8 shapes, dummy weights.
# Carry bench/peers/llama.cpp.tar.xz and bench/peers/flashlane.xz (the default model moved out).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
FLASHLANE=$FL FLASHLANE_COMMIT=608d3d1 timeout 330 bench/gpu_vs_llamacpp.sh /tmp/vs \
  --shapes qwen3-8b --rounds 2 --deadline 240
el "vs rc=$?"
cp /tmp/vs/table.md /tmp/vs/log.txt $OUT/ 2>/dev/null
tar -C /tmp/vs -cJf $OUT/vs_json.tar.xz $(cd /tmp/vs && ls *.json 2>/dev/null) 2>/dev/null
cat $OUT/table.md
S="max16:FLASHLANE_AB=1 every:FLASHLANE_MATMUL_PREFETCH_MAX_MB=1000000"
for shape in qwen3-next-a3b-slice-fp8 qwen3-4b-fp8; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
  SETTINGS="$S" STREAMS=1,8,64 ROUNDS=1 timeout 100 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /dev/null 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_prefetch_fp8.txt
done
