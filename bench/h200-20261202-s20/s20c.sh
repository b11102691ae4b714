#!/usr/bin/env bash
# Session 20, call 3 (on the machine call 2 left warm): flashlane vs llama.cpp on the same weights
# (Qwen3-4B shape and the A3B slice, one round), then flashlane sampled (Qwen3's recommended
# T 0.6 / top-k 20 / top-p 0.95) on the same checkpoints.
set -u
T0=$(date +%s)
FL=/tmp/fl3; [ -x $FL ] || { xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL; }
FLASHLANE_COMMIT=$(git rev-parse --short HEAD 2>/dev/null || echo s20) bench/gpu_vs_llamacpp.sh $OUT/vs \
  --shapes qwen3-4b,qwen3-next-a3b-slice --rounds 1 --keep-models --deadline 330 --flashlane $FL 2>&1 | tail -30
for shape in qwen3-4b qwen3-next-a3b-slice; do
  [ $(( $(date +%s) - T0 )) -gt 480 ] && break
  echo "== $shape sampled" >> $OUT/sampled_vs.txt
  timeout $(( 560 - ($(date +%s) - T0) )) $FL bench --device cuda --model /tmp/flashlane-gpu-bench/$shape \
    --streams 1,8,32,64 --prompt-tokens 128 --new-tokens 128 --temperature 0.6 --top-k 20 --top-p 0.95 2>&1 | tail -6 >> $OUT/sampled_vs.txt
done
cat $OUT/sampled_vs.txt
tar -C $OUT -cJf $OUT/vs.tar.xz vs 2>/dev/null && rm -rf $OUT/vs
echo "total $(( $(date +%s) - T0 )) s"
