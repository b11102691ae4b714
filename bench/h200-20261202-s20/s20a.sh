#!/usr/bin/env bash
# Session 20, call 1: the GPU tests at main + the logits' pinned host buffer (4l default model),
# then sampled streams against greedy ones (Qwen3-4B shape, dummy weights).
set -u
T0=$(date +%s)
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl3; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
SETTINGS="" TESTS_SECONDS=240 timeout 245 bench/gpu_session.sh $OUT
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
d=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $d/
for s in "--temperature 1" "--temperature 0.6 --top-k 20 --top-p 0.95" "--temperature 0"; do
  [ $(( $(date +%s) - T0 )) -gt 420 ] && break
  echo "== $s" >> $OUT/sampled.txt
  timeout $(( 440 - ($(date +%s) - T0) )) $FL bench --device cuda --model $d --load-format dummy --streams 1,64 \
    --prompt-tokens 128 --new-tokens 64 $s 2>&1 | tail -3 >> $OUT/sampled.txt
done
cat $OUT/sampled.txt
echo "total $(( $(date +%s) - T0 )) s"
