#!/usr/bin/env bash
# Prepared in session 49 for issue 18 (not run): stage 4z of the default model, from the shipped
# model, training again on counts it gets wrong. `tools/train_tiny/mine_counts.py` asked the
# shipped model 6,000 counts of the trained side of skills.py's split (never a held-out case) at
# T = 0 on this session's CPU (bench/cpu-20261205-s49/mined_6000.json.xz, and its figures in
# bench/RESULTS.md); `train.py --replay` mixes its failed counts back in at 10 % of the tokens
# (the other counts at 60 % instead of 70 %: as many count tokens as 4x trained on), half as they were and half as counts like them (`skills.count_near`: the same step, direction
# and offset of the end from the grid, a start of as many digits, within a quarter of the
# length), beside 4x's recipe (the shipped model's: s28a.sh's arguments, the stop's
# neighbourhood weighted 8 over 5 decisions, --ema 0.995). Earlier stages moved the mix of all
# counts (4y: more ends off the grid, no gain at T = 0); this one weights the kinds of count this
# model fails. One stage, --micro-batches 2 (an H100's memory), seed 3838.
# Caution from session 49's CPU run of the same replay (25 % of the tokens, batches of 2 × 2,048,
# 1.2 M tokens: "4z-cpu", bench/RESULTS.md): every trunk it gave counted worse (455-484 of 533 at
# T = 0 against 488), early stops and misread second numbers most; judge this stage on those too.
# After it, on the CPU as for 4y (bench/h100-20261205-s48/call4_train.sh): reassemble the trunks,
# means with the shipped trunk (tools/train_tiny/average_models.py), the three count sets
# (`eval_skills.py --skills count`: the default set, seeds 20261203 and 20261204 with --cases
# 240); ship only a trunk that beats the shipped one's 488 of 533 within 4 digits at T = 0 and
# keeps the other skills (the whole `eval_skills.py --cases 120`), then train its chain head.
# Carry bench/peers/tiny_model.xz (the default model moved out of the tree). TRAIN_S (default
# 400) and STEPS (300) bound the training.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
sha256sum models/flashlane-tiny/model.safetensors
M=/tmp/meta; mkdir -p $M
xz -dc bench/cpu-20261205-s49/mined_6000.json.xz > /tmp/mined_6000.json
args=(--init models/flashlane-tiny --mix skills --phase1-len 2048 --seq-len 4096 --batch 32
    --steps ${STEPS:-300} --phase1-steps 100 --lr 3e-4 --warmup 10 --train-seconds ${TRAIN_S:-400}
    --total-seconds $(( ${TRAIN_S:-400} + 10 ))
    --eval-gen-tokens 0 --code-mb 4 --per-package-mb 1 --stop-weight 1 --decision-weight 8
    --first-step-weight 8 --count-share 0.60 --short-count-frac 0.35 --count-kinds 0.3,0.35,0.25,0.1
    --shares '{"arith":0.03,"words":0.03,"calendar":0.01,"spell":0.03,"cannot":0.02,"roles":0.02,"tools":0.08,"repeat":0.01,"sequence":0.01,"think":0.0,"code_chat":0.02}'
    --replay /tmp/mined_6000.json --replay-share 0.10 --replay-near 0.5
    --seed 3838 --near-stop-weight 8 --near-stop-window 5 --ema 0.995 --micro-batches 2)
tools/train_tiny/device_stage.sh /tmp/s4z_out s4z -- "${args[@]}" > /dev/null 2>&1
el "stage rc=$?"
cp /tmp/s4z_out/train_log_s4z.txt $M/; grep -E "replay|synthetic" $M/train_log_s4z.txt | cut -c1-300; tail -6 $M/train_log_s4z.txt
for s in s4z s4z_raw; do
    [ -f /tmp/$s/model.safetensors ] || continue
    python3 - "$s" <<'PY'
import sys
from safetensors.torch import load_file, save_file
s = sys.argv[1]
t = {k: v for k, v in load_file(f"/tmp/{s}/model.safetensors").items() if not k.startswith("mtp.")}
save_file(t, f"/tmp/{s}/trunk.safetensors", metadata={"format": "pt"})
PY
    (cd /tmp/$s && sha256sum trunk.safetensors) > $M/trunk_$s.sha256
    xz -T16 -6 -c /tmp/$s/trunk.safetensors | split -b 15M - $OUT/trunk_$s.safetensors.xz.part-
done
el "packed"
tar -C /tmp -cJf $OUT/meta.tar.xz meta
ls -l $OUT
