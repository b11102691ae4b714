#!/usr/bin/env bash
# Session 28 (from session 27's prepared next_s28a.sh, at 27279b5): one stage of the default model
# a call (STAGES; two 32-row stages side by side ran out of the H200's memory in call 1), at 32
# rows a step, from models/flashlane-tiny as the carried tiny_model.xz holds it. The trunk comes
# back without its mtp.* tensors (xz, parts of 15 MiB) for the CPU evaluation that decides; the
# chain head is trained for a shipped trunk in a later call (s28b.sh). TRAIN_S (default 460) and
# STEPS (300) bound the training; EXTRA is appended to every stage's train.py arguments.
#   4t (call 1, out of memory; not run since): 4p's recipe (4s's arguments), seed 3131;
#   4u (call 2, STAGES=s4u TRAIN_S=470, from 4p): the stop's neighbourhood weighted more and
#       wider (--near-stop-weight 8 --near-stop-window 5), seed 3232: late stops were the
#       largest kind of 4p's T = 0 count failures (8 of 17);
#   4v (call 3, STAGES=s4v STEPS=340 TRAIN_S=400): 4u's recipe, seed 3434, from 4w, the mean of
#       4p's and 4u's trunks (tools/train_tiny/average_models.py);
#   4x (session 29's call 1: STAGES=s4x STEPS=400 TRAIN_S=450 EXTRA="--ema 0.995", from 4w):
#       4u's recipe, seed 3535, saving the moving average of its weights, which starts at 4w's
#       (train.py --ema): a stage averaged with its parent along the way, as 4w is at the end.
#       Its last step's trunk comes back too, as trunk_s4x_raw (the call ran past its 600 s
#       while packing it: keep STEPS and TRAIN_S lower beside --ema).
# Carry bench/peers/tiny_model.xz, the default model moved out.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
sha256sum models/flashlane-tiny/model.safetensors
M=/tmp/meta; mkdir -p $M
common=(--init models/flashlane-tiny --mix skills --phase1-len 2048 --seq-len 4096 --batch 32
    --steps ${STEPS:-300} --phase1-steps 100 --lr 3e-4 --warmup 10 --train-seconds ${TRAIN_S:-460} --total-seconds $(( ${TRAIN_S:-460} + 10 ))
    --eval-gen-tokens 0 --code-mb 4 --per-package-mb 1 --stop-weight 1 --decision-weight 8
    --first-step-weight 8 --count-share 0.70 --short-count-frac 0.35 --count-kinds 0.3,0.35,0.25,0.1
    --shares '{"arith":0.03,"words":0.03,"calendar":0.01,"spell":0.03,"cannot":0.02,"roles":0.02,"tools":0.08,"repeat":0.01,"sequence":0.01,"think":0.0,"code_chat":0.02}')
# Two 32-row stages do not fit one H200 side by side (each holds ~70 GiB: call 1 ran out of
# memory at 73 s), so STAGES picks which run, one after the other's call.
STAGES=${STAGES:-s4u}
for s in $STAGES; do
    case $s in s4t|s4u|s4v|s4x) ;; *) echo "unknown stage $s (s4t, s4u, s4v or s4x)"; exit 2 ;; esac
done
case " $STAGES " in *" s4t "*) tools/train_tiny/device_stage.sh /tmp/s4t_out s4t -- "${common[@]}" --seed 3131 \
    --near-stop-weight 4 --near-stop-window 3 ${EXTRA:-} > /dev/null 2>&1 & ;; esac
for s in s4u s4v s4x; do
    case $s in s4u) seed=3232 ;; s4v) seed=3434 ;; s4x) seed=3535 ;; esac
    case " $STAGES " in *" $s "*) tools/train_tiny/device_stage.sh /tmp/${s}_out $s -- "${common[@]}" \
        --seed $seed --near-stop-weight 8 --near-stop-window 5 ${EXTRA:-} > /dev/null 2>&1 & ;; esac
done
wait
el "stages done"
for s in $STAGES; do
    cp /tmp/${s}_out/train_log_$s.txt $M/; tail -4 $M/train_log_$s.txt
done
# A stage with --ema leaves its last step's weights in /tmp/NAME_raw (train.py): both come back.
for s in $STAGES ${STAGES// /_raw }_raw; do
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
el total
