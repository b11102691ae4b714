# Session 50, on the 2-core EPYC (CPU, f32, 31 min): stage "4z-lowlr", not shipped (bench/RESULTS.md).
cd /work/main
exec /tmp/venv/bin/python tools/train_tiny/train.py --out /tmp/cpu_train/s4zl --init models/flashlane-tiny --mix skills \
  --seq-len 2048 --batch 2 --steps 280 --phase1-steps 0 --lr 2e-5 --warmup 10 --ema 0.99 \
  --train-seconds 1900 --total-seconds 1960 --eval-gen-tokens 0 --code-mb 1 --per-package-mb 0.5 --tok-code-mb 0.5 \
  --stop-weight 1 --decision-weight 8 --first-step-weight 8 --near-stop-weight 8 --near-stop-window 5 \
  --count-share 0.45 --short-count-frac 0.35 --count-kinds 0.3,0.35,0.25,0.1 \
  --shares '{"arith":0.03,"words":0.03,"calendar":0.01,"spell":0.03,"cannot":0.02,"roles":0.02,"tools":0.08,"repeat":0.01,"sequence":0.01,"think":0.0,"code_chat":0.02}' \
  --replay /tmp/mined_6000.json --replay-share 0.10 --replay-near 0.5 --seed 5050
