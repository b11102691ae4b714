#!/usr/bin/env bash
# Session 19: the default model's stage 4l — stage 4h's arguments, a new seed, and train.py's
# phase-1 fix (the short rows no longer train chat tails cut from their prompts).
set -u
tools/train_tiny/device_stage.sh ${STAGE_OUT:-$OUT} s4l -- --init models/flashlane-tiny --mix skills --seed 1919 \
  --steps 700 --phase1-steps 360 --phase1-len 2048 --batch 8 --seq-len 4096 --lr 3e-4 --warmup 10 \
  --train-seconds 330 --total-seconds 350 --eval-gen-tokens 0 --code-mb 4 --per-package-mb 1 \
  --stop-weight 1 --decision-weight 8 --count-share 0.70 --short-count-frac 0.5 --count-kinds 0.3,0.35,0.25,0.1 \
  --shares '{"arith":0.03,"words":0.03,"calendar":0.01,"spell":0.03,"cannot":0.02,"roles":0.02,"tools":0.08,"repeat":0.01,"sequence":0.01,"think":0.0,"code_chat":0.02}'
