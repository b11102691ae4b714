#!/usr/bin/env bash
# Session 68, the same-run table against llama.cpp at the new default (`--attention-kernel auto`):
# Qwen3-4B and -8B after 128-token prompts, 2 rounds (issue 12's 1- and 64-stream goals), then
# Qwen3-4B after 4,096-token prompts at 1 / 8 / 32 streams, 1 round (auto runs those rows on the
# tensor cores, against llama.cpp's flash attention). Carry bench/peers/{flashlane.xz,
# llama.cpp.tar.xz}; limit 600. COMMIT names the binaries' commit.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
left=$(( ${LIMIT:-570} - 150 ))
FLASHLANE=$FL FLASHLANE_COMMIT=${COMMIT:?set COMMIT} timeout $left bench/gpu_vs_llamacpp.sh /tmp/vs \
  --shapes ${SHAPES:-qwen3-4b,qwen3-8b} --rounds ${ROUNDS:-2} --deadline $(( left - 140 ))
el "table rc=$?"
cp /tmp/vs/table.md $OUT/table.md 2>/dev/null; cp /tmp/vs/log.txt $OUT/log.txt 2>/dev/null
tar -C /tmp/vs -cJf $OUT/vs_json.tar.xz $(cd /tmp/vs && ls *.json 2>/dev/null) 2>/dev/null
cat $OUT/table.md
left=$(( ${LIMIT:-570} - $(date +%s) + T0 - 10 ))
if [ $left -gt 100 ]; then
  FLASHLANE=$FL FLASHLANE_COMMIT=$COMMIT timeout $left bench/gpu_vs_llamacpp.sh /tmp/vs4k \
    --shapes qwen3-4b --prompt 4096 --new 64 --streams 1,8,32 --rounds 1 --deadline $(( left - 60 ))
  el "4k table rc=$?"
  cp /tmp/vs4k/table.md $OUT/table_4k.md 2>/dev/null; cp /tmp/vs4k/log.txt $OUT/log_4k.txt 2>/dev/null
  cat $OUT/table_4k.md
else
  el "skipped: the 4,096-token table (no room)"
fi
exit 0
