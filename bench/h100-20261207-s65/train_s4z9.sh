#!/usr/bin/env bash
# Session 65: issue 18's stage s4z9, session 63's s4z7/s4z8 recipe from the 9-layer 4z6 (which
# moved counting by no more than five held-out cases either way, the control) with one change:
# `--distractor-weight 8`, the go-on decisions after numbers that look like the count's end
# (skills.count_distractor: 5299 in a count to 5399) weighted 8 more. Of the shipped model's
# held-out counts at T = 0 that stopped early far from their end, most stopped at such a number.
# OFF_GRID_END_WEIGHT=4 STAGE=s4z10 adds `--off-grid-end-weight 4` (the last go-on and the stop
# of a count whose end is off its step's grid: 15 of the 57 failures went past such an end).
# Carry bench/peers/s4z6_model.tar.xz (no tiny_model.xz: the training reads only the init model
# and the tree's tokenizer); keep bench/h100-20261206-s51, bench/cpu-20261205-s49 and
# bench/h100-20261206-s54 in the tree. Limit 600.
set -u
STAGE=${STAGE:-s4z9} SEED=${SEED:-6565} INIT_TAR=bench/peers/s4z6_model.tar.xz SHORT_COUNT_FRAC=0.15 \
  COUNT_OFF_GRID=0.5 COUNT_KINDS=0.15,0.4,0.05,0.4 TRAIN_S=${TRAIN_S:-420} \
  MINED_XZ=bench/h100-20261206-s54/mined_cpu_3000_s54.json.xz \
  EXTRA_TRAIN_ARGS="--distractor-weight ${DISTRACTOR_WEIGHT:-8} --off-grid-end-weight ${OFF_GRID_END_WEIGHT:-1}" \
  bash bench/h100-20261206-s51/next_train_s4z2.sh
