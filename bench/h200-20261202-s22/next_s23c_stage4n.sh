#!/usr/bin/env bash
# For the next device session (written in session 22): the default model's stage 4n (issue 18).
# From the shipped 4m (counting at T = 0 100 of 121; its failures short / long at T = 0: a
# misread second number 2 / 4, late stops 1 / 9, early 1 / 4): 4m's arguments again, another
# 470 s from its weights, seed 2323. Carry bench/peers/tiny_model.xz with the default model moved
# out of the tree; evaluate here afterwards (tools/train_tiny/eval_skills.py --cases 120) and ship
# only if counting beats 4m's 100 / 88 of 121 without losing the other skills.
set -u
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
tools/train_tiny/device_stage.sh "$OUT" s4n -- --init models/flashlane-tiny --mix skills --seed 2323 \
  --steps 1000 --phase1-steps 360 --phase1-len 2048 --batch 8 --seq-len 4096 --lr 3e-4 --warmup 10 \
  --train-seconds 470 --total-seconds 500 --eval-gen-tokens 0 --code-mb 4 --per-package-mb 1 \
  --stop-weight 1 --decision-weight 8 --count-share 0.70 --short-count-frac 0.35 --count-kinds 0.3,0.35,0.25,0.1 \
  --shares '{"arith":0.03,"words":0.03,"calendar":0.01,"spell":0.03,"cannot":0.02,"roles":0.02,"tools":0.08,"repeat":0.01,"sequence":0.01,"think":0.0,"code_chat":0.02}'
