#!/usr/bin/env bash
# For the next device session (written in session 27, not yet run): two stages from the shipped
# trunk (4p's; the shipped file is stage 5c, whose trunk is 4p's bit for bit) at 32 rows a step,
# which session 27's 4s trained at 1.67x the tokens/s of 8 rows, for 300 s instead of 270, and
# more of it on full 4,096-token rows (4s spent all but 8 of its 158 steps on 2,048-token ones;
# time: ~60 s of data, 300 of training, 130 of evaluation, within a call's 600):
#   4t: 4s's arguments (4p's recipe at 32 rows), seed 3131;
#   4u: the same with the stop's neighbourhood weighted more and wider (--near-stop-weight 8
#       --near-stop-window 5), seed 3232: 4p's T = 0 failures are still mostly late stops.
# Each is screened by eval_skills.py on the GPU; the better one's weights come back (xz, two
# parts) for the CPU evaluation that decides. Its chain head is trained in next_s28b.sh.
# Carry bench/peers/{tiny_model.xz,flashlane.xz} and .whl, the default model moved out.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
python3 -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' || { echo "eval wheels need Python 3.12"; exit 2; }
. bench/unpack_peers.sh
sha256sum models/flashlane-tiny/model.safetensors
python3 -m pip install -q --no-deps --no-index --target /tmp/evalsite .whl/eval/*.whl
M=/tmp/meta; mkdir -p $M
common=(--init models/flashlane-tiny --mix skills --phase1-len 2048 --seq-len 4096 --batch 32
    --steps 240 --phase1-steps 100 --lr 3e-4 --warmup 10 --train-seconds 300 --total-seconds 320
    --eval-gen-tokens 0 --code-mb 4 --per-package-mb 1 --stop-weight 1 --decision-weight 8
    --first-step-weight 8 --count-share 0.70 --short-count-frac 0.35 --count-kinds 0.3,0.35,0.25,0.1
    --shares '{"arith":0.03,"words":0.03,"calendar":0.01,"spell":0.03,"cannot":0.02,"roles":0.02,"tools":0.08,"repeat":0.01,"sequence":0.01,"think":0.0,"code_chat":0.02}')
tools/train_tiny/device_stage.sh /tmp/s4t_out s4t -- "${common[@]}" --seed 3131 \
    --near-stop-weight 4 --near-stop-window 3 > /dev/null 2>&1 &
tools/train_tiny/device_stage.sh /tmp/s4u_out s4u -- "${common[@]}" --seed 3232 \
    --near-stop-weight 8 --near-stop-window 5 > /dev/null 2>&1 &
wait
el "stages done"
for s in s4t s4u; do
    cp models/flashlane-tiny/{tokenizer.json,tokenizer_config.json,generation_config.json} /tmp/$s/
    # SIGINT, not SIGTERM: eval_skills.py's `finally` then stops the server it started.
    PYTHONPATH=/tmp/evalsite timeout -s INT -k 20 130 python3 tools/train_tiny/eval_skills.py --flashlane $FL \
        --model /tmp/$s --cases 120 --out $M/skills_eval_$s.json --serve-arg=--device --serve-arg=cuda \
        > $M/${s}_eval.txt 2>&1 &
done
wait
el "evaluations done"
for s in s4t s4u; do echo "== $s"; tail -14 $M/${s}_eval.txt; cp /tmp/${s}_out/train_log_$s.txt $M/; cp /tmp/${s}_out/eval.json $M/eval_$s.json 2>/dev/null; done
best=$(python3 tools/train_tiny/better_stage.py $M s4t s4u)
el "better: $best"
if [ "$best" != none ]; then
    (cd /tmp/$best && sha256sum model.safetensors) > $M/model_$best.sha256
    xz -T16 -6 -c /tmp/$best/model.safetensors | split -b 15M - $OUT/model_$best.safetensors.xz.part-
fi
tar -C /tmp -cJf $OUT/meta.tar.xz meta
ls -l $OUT
el total
