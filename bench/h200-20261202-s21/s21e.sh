#!/usr/bin/env bash
# Session 21, call 5: the final binary (one row block tiled only for an lm_head-wide matrix):
# old (d317402) against new end to end on the 4B shape and the A3B slice, where a 64 x 128
# prompt of the 4B shape goes now (per kernel), and the GPU tests.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
OLD=/tmp/fl_old; xz -dc bench/peers/flashlane_old.xz > $OLD; chmod +x $OLD
NEW=/tmp/fl_new; xz -dc bench/peers/flashlane.xz > $NEW; chmod +x $NEW
for shape in qwen3-4b qwen3-next-a3b-slice; do
  ROUNDS=1 STREAMS=1,64 timeout 200 bench/gpu_ab.sh /tmp/ab-$shape $shape $OLD $NEW > /dev/null 2>&1
  echo "A/B $shape rc=$? at $(el) s"; cat /tmp/ab-$shape/ab.txt | tee -a $OUT/ab.txt
done
STEPS=prompt PROMPT_TOKENS=128 NEW_TOKENS=2 RUN_TIMEOUT=100 timeout 110 bench/gpu_profile.sh /tmp/q qwen3-4b $NEW 64 > $OUT/profile_4b_prompt64x128.txt 2>&1
echo "profile rc=$? at $(el) s"
SETTINGS="" TESTS_SECONDS=200 timeout 205 bench/gpu_session.sh /tmp/session
cp /tmp/session/tests_summary.txt $OUT/ 2>/dev/null
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
echo "total $(el) s"
