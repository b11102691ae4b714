#!/usr/bin/env bash
# Session 26, call 2: two stages from 4o side by side on the one GPU (each slower for the other):
#   4p: 4o's arguments, seed 2727, and the count's second number weighted 8 (--first-step-weight 8,
#       4j's weight: 4o's misread steps rose 6 -> 9 while its late stops fell 10 -> 7);
#   4q: 4o's arguments, seed 2828, no first-step weight (the control: more of 4o's training).
# Carry bench/peers/s4o_model.xz (4o's weights) with the default model moved out of the tree.
set -u
T0=$(date +%s)
init=/tmp/init4o
mkdir -p $init && cp models/flashlane-tiny/*.json $init/
xz -T16 -dc bench/peers/s4o_model.xz > $init/model.safetensors
common=(--init $init --mix skills --steps 1000 --phase1-steps 360 --phase1-len 2048 --batch 8
    --seq-len 4096 --lr 3e-4 --warmup 10 --train-seconds 430 --total-seconds 450 --eval-gen-tokens 0
    --code-mb 4 --per-package-mb 1 --stop-weight 1 --decision-weight 8 --near-stop-weight 4
    --near-stop-window 3 --count-share 0.70 --short-count-frac 0.35 --count-kinds 0.3,0.35,0.25,0.1
    --shares '{"arith":0.03,"words":0.03,"calendar":0.01,"spell":0.03,"cannot":0.02,"roles":0.02,"tools":0.08,"repeat":0.01,"sequence":0.01,"think":0.0,"code_chat":0.02}')
tools/train_tiny/device_stage.sh /tmp/s4p_out s4p -- "${common[@]}" --seed 2727 --first-step-weight 8 > /dev/null 2>&1 &
tools/train_tiny/device_stage.sh /tmp/s4q_out s4q -- "${common[@]}" --seed 2828 > /dev/null 2>&1 &
wait
echo "stages done at $(( $(date +%s) - T0 )) s"
for s in s4p s4q; do
    mkdir -p $OUT/$s
    mv /tmp/${s}_out/model.safetensors.part-* $OUT/$s/
    tar -C /tmp -cJf $OUT/${s}_meta.tar.xz ${s}_out
    grep -E "val |time budget|exited" /tmp/${s}_out/train_log_$s.txt | tail -2 | cut -c1-600
done
echo "total $(( $(date +%s) - T0 )) s"
