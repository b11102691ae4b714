#!/usr/bin/env bash
# For the next device session (written in session 26, not yet run): two stages from the shipped
# 4p side by side on the one GPU, each screened there by eval_skills.py on the GPU, and the
# better one's weights brought back for the CPU evaluation that decides (the shipped figures
# are the CPU's).
#   4r: 4p's arguments again, seed 2929 (4p's late stops: 8 at T = 0; more of the same training
#       moved 4o -> 4p only with the first-step weight, so this is the control; since 4p the
#       near-stop marks count only assistant turns' stops, so it is 4p's recipe with that fix);
#   4s: 4p's arguments with the stop's neighbourhood weighted more and wider
#       (--near-stop-weight 8 --near-stop-window 5), seed 3030.
# Carry bench/peers/{tiny_model.xz,flashlane.xz} and .whl (tools/train_tiny/fetch_eval_wheels.sh),
# with the default model moved out of the tree (bench/pack_gpu_tests.sh --flashlane first).
set -u
T0=$(date +%s)
# The wheels are for Python 3.12 (the machine's in 2026-11); say so plainly if it changed.
python3 -c 'import sys; assert sys.version_info[:2] == (3, 12), sys.version' || { echo "eval wheels need Python 3.12"; exit 2; }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
python3 -m pip install -q --no-deps --no-index --target /tmp/evalsite .whl/eval/*.whl
common=(--init models/flashlane-tiny --mix skills --steps 1000 --phase1-steps 360 --phase1-len 2048
    --batch 8 --seq-len 4096 --lr 3e-4 --warmup 10 --train-seconds 300 --total-seconds 320
    --eval-gen-tokens 0 --code-mb 4 --per-package-mb 1 --stop-weight 1 --decision-weight 8
    --first-step-weight 8 --count-share 0.70 --short-count-frac 0.35 --count-kinds 0.3,0.35,0.25,0.1
    --shares '{"arith":0.03,"words":0.03,"calendar":0.01,"spell":0.03,"cannot":0.02,"roles":0.02,"tools":0.08,"repeat":0.01,"sequence":0.01,"think":0.0,"code_chat":0.02}')
tools/train_tiny/device_stage.sh /tmp/s4r_out s4r -- "${common[@]}" --seed 2929 \
    --near-stop-weight 4 --near-stop-window 3 > /dev/null 2>&1 &
tools/train_tiny/device_stage.sh /tmp/s4s_out s4s -- "${common[@]}" --seed 3030 \
    --near-stop-weight 8 --near-stop-window 5 > /dev/null 2>&1 &
wait
echo "stages done at $(( $(date +%s) - T0 )) s"
for s in s4r s4s; do
    # the tokenizer and generation config beside the weights (train.py writes config.json)
    cp models/flashlane-tiny/{tokenizer.json,tokenizer_config.json,generation_config.json} /tmp/$s/
    # SIGINT, not SIGTERM: eval_skills.py's `finally` then stops the server it started.
    PYTHONPATH=/tmp/evalsite timeout -s INT -k 20 150 python3 tools/train_tiny/eval_skills.py --flashlane $FL \
        --model /tmp/$s --cases 120 --out $OUT/skills_eval_$s.json --serve-arg=--device --serve-arg=cuda \
        > /tmp/${s}_eval.txt 2>&1 &
done
wait
echo "evaluations done at $(( $(date +%s) - T0 )) s"
for s in s4r s4s; do echo "== $s"; cat /tmp/${s}_eval.txt | tail -14; tar -C /tmp --exclude='*.part-*' -cJf $OUT/${s}_meta.tar.xz ${s}_out; done
# The better of the two by counts right within 4 digits at T = 0 and 0.7 together.
best=$(python3 - "$OUT" <<'PY'
import json, sys
row = "count, every number of up to 4 digits (both count rows)"
score = {}
for s in ("s4r", "s4s"):
    try:
        r = json.load(open(f"{sys.argv[1]}/skills_eval_{s}.json"))["results"][row]
        score[s] = r["0.0"]["right"] + r["0.7"]["right"]
    except (OSError, KeyError):
        score[s] = -1
print(f"scores {score}", file=sys.stderr)
print(max(score, key=score.get) if max(score.values()) >= 0 else "none")
PY
)
echo "better: $best"
[ "$best" = none ] && { echo "neither evaluation finished: no weights brought back"; exit 1; }
mv /tmp/${best}_out/model.safetensors.part-* $OUT/
echo "total $(( $(date +%s) - T0 )) s"
