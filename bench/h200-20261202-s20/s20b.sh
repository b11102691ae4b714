#!/usr/bin/env bash
# Session 20, call 2: the GPU tests with draws on the GPU and the pinned logits buffer (4l default
# model), then sampled streams against greedy ones (Qwen3-4B shape, dummy weights); beside them,
# llama.cpp built and the checkpoints made for call 3 (bench/gpu_vs_llamacpp.sh --prepare-only).
set -u
T0=$(date +%s)
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl3; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
setsid nohup nice -n 15 env FLASHLANE=$FL bench/gpu_vs_llamacpp.sh /tmp/prep --shapes qwen3-4b,qwen3-next-a3b-slice \
  --prepare-only > /tmp/prep.log 2>&1 < /dev/null &
SETTINGS="" TESTS_SECONDS=330 timeout 335 bench/gpu_session.sh $OUT
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
d=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $d/
for s in "--temperature 1" "--temperature 0.6 --top-k 20 --top-p 0.95" "--temperature 0"; do
  [ $(( $(date +%s) - T0 )) -gt 500 ] && break
  echo "== $s" >> $OUT/sampled.txt
  timeout $(( 530 - ($(date +%s) - T0) )) $FL bench --device cuda --model $d --load-format dummy --streams 1,64 \
    --prompt-tokens 128 --new-tokens 64 $s 2>&1 | tail -3 >> $OUT/sampled.txt
done
cat $OUT/sampled.txt
tail -5 /tmp/prep.log > $OUT/prep.txt; cat /tmp/prep/log.txt 2>/dev/null | tail -5 >> $OUT/prep.txt
echo "total $(( $(date +%s) - T0 )) s"
