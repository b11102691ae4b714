#!/usr/bin/env bash
# Session 19, call 2 (the machine still warm from call 1, which built llama.cpp and made the
# checkpoints): flashlane against llama.cpp, same run, same weights, 2 interleaved rounds.
set -u
T0=$(date +%s)
FL=/tmp/fl; [ -x $FL ] || { xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL; }
tail -3 /tmp/vs/log.txt 2>/dev/null
FLASHLANE_COMMIT=${COMMIT:-?} timeout 580 python3 bench/gpu_vs_llamacpp.py --out $OUT/vs --flashlane $FL \
  --shapes qwen3-next-a3b-slice,qwen3-4b --q8-peer --rounds 2 --deadline 520 > $OUT/vs_stdout.txt 2>&1
echo "rc=$?"; cat $OUT/vs/table.md 2>/dev/null
cp /tmp/vs/log.txt $OUT/prep_log.txt 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
