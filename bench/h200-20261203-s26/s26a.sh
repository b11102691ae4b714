#!/usr/bin/env bash
# Session 26, call 1: training stage 4o (4m's arguments with the decisions next to a count's stop
# weighted 4 more: --near-stop-weight 4 --near-stop-window 3) and, beside it, the GPU tests.
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz} with the default model moved out of the tree.
set -u
T0=$(date +%s)
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
(bench/gpu_tests.sh /tmp/gpu_tests > /tmp/gpu_tests.log 2>&1) &
tools/train_tiny/device_stage.sh /tmp/s4o_out s4o -- --init models/flashlane-tiny --mix skills \
    --seed 2626 --steps 1000 --phase1-steps 360 --phase1-len 2048 --batch 8 --seq-len 4096 \
    --lr 3e-4 --warmup 10 --train-seconds 450 --total-seconds 470 --eval-gen-tokens 0 \
    --code-mb 4 --per-package-mb 1 --stop-weight 1 --decision-weight 8 \
    --near-stop-weight 4 --near-stop-window 3 --count-share 0.70 \
    --short-count-frac 0.35 --count-kinds 0.3,0.35,0.25,0.1 --shares '{"arith":0.03,"words":0.03,
    "calendar":0.01,"spell":0.03,"cannot":0.02,"roles":0.02,"tools":0.08,"repeat":0.01,
    "sequence":0.01,"think":0.0,"code_chat":0.02}' > /dev/null 2>&1
echo "stage rc=$? at $(( $(date +%s) - T0 )) s"
wait
cat /tmp/gpu_tests/summary.txt
tar -C /tmp -cJf $OUT/gpu_tests.tar.xz gpu_tests gpu_tests.log
mv /tmp/s4o_out/model.safetensors.part-* $OUT/
tar -C /tmp -cJf $OUT/s4o_meta.tar.xz s4o_out
grep -E "val |time budget|exited" /tmp/s4o_out/train_log_s4o.txt | tail -4
echo "total $(( $(date +%s) - T0 )) s"
