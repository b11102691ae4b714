#!/usr/bin/env bash
# Session 27, call 2, on the machine call 1 left warm (its /tmp/s4s): the chain head for the 4s
# trunk, which call 1's 170-s limit cut short (its greedy replies and data took most of it beside
# two evaluations). As run (the command's first lines, a stray empty heredoc, are left out).
ls /tmp/s4s >/dev/null 2>&1 || { echo "cold: no /tmp/s4s"; exit 3; }
PYTHONUNBUFFERED=1 python3 tools/train_tiny/train_mtp_chain.py --init /tmp/s4s --out /tmp/cs4s --chain 4 \
    --step-weights 1,1,1,1 --steps 700 --train-seconds 90 --mix skills --code-mb 4 --per-package-mb 1 \
    --count-share 0.45 > $OUT/chain_log_cs4s.txt 2>&1
echo rc=$?; tail -3 $OUT/chain_log_cs4s.txt
cp /tmp/cs4s/chain_eval.json $OUT/chain_eval_cs4s.json
python3 -c "
from safetensors.torch import load_file, save_file
t = {k: v for k, v in load_file('/tmp/cs4s/model.safetensors').items() if k.startswith('mtp.')}
save_file(t, '$OUT/mtp_cs4s.safetensors', metadata={'format': 'pt'})
print(len(t))"
(cd /tmp/cs4s && sha256sum model.safetensors) > $OUT/cs4s.sha256; cat $OUT/cs4s.sha256
