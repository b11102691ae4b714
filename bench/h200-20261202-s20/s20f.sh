#!/usr/bin/env bash
# Session 20, call 3: the draw kernel split over a cluster of 8 blocks a row: the GPU tests, then
# sampled streams against greedy ones (Qwen3-4B shape, then the A3B slice; dummy weights).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl_new; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
SETTINGS="" TESTS_SECONDS=200 timeout 205 bench/gpu_session.sh $OUT
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
for shape in qwen3-4b qwen3-next-a3b-slice; do
  d=$(mktemp -d); cp bench/shapes/$shape/config.json $d/
  for s in "--temperature 1" "--temperature 0.6 --top-k 20 --top-p 0.95" "--temperature 0"; do
    [ $(el) -gt 480 ] && break
    echo "== $shape $s" >> $OUT/sampled.txt
    timeout $(( 520 - $(el) )) $FL bench --device cuda --model $d --load-format dummy --streams 1,8,64 \
      --prompt-tokens 128 --new-tokens 64 $s 2>&1 | tail -4 >> $OUT/sampled.txt
  done
done
cat $OUT/sampled.txt
echo "total $(el) s"
