#!/usr/bin/env bash
# For the next device session (written in session 27, not yet run), after next_s28a.sh and only
# if the CPU evaluation ships a new trunk: with that trunk as models/flashlane-tiny (packed into
# tiny_model.xz, its parity fixture made again here first), the MTP head trained again for
# chained drafts on it (stage 5c's command), put in place, then every GPU test and MTP's speed-up
# with it. Brings back the head's mtp.* tensors (to splice into the trunk's file here) and its
# model's sha256 (the splice must match it).
# Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz} with the default model moved out.
set -u
T0=$(date +%s)
. bench/unpack_peers.sh
sha256sum models/flashlane-tiny/model.safetensors
PYTHONUNBUFFERED=1 timeout 240 python3 tools/train_tiny/train_mtp_chain.py --init models/flashlane-tiny \
    --out /tmp/chain --chain 4 --step-weights 1,1,1,1 --steps 700 --train-seconds 90 --mix skills \
    --code-mb 4 --per-package-mb 1 --count-share 0.45 > $OUT/chain_log.txt 2>&1
echo "chain rc=$? at $(( $(date +%s) - T0 )) s"; grep -E '"?(before|after)' $OUT/chain_log.txt | cut -c1-400
[ -f /tmp/chain/model.safetensors ] || { echo "no chain head: the tests are not run"; exit 1; }
cp /tmp/chain/chain_eval.json $OUT/
python3 -c "
from safetensors.torch import load_file, save_file
t = {k: v for k, v in load_file('/tmp/chain/model.safetensors').items() if k.startswith('mtp.')}
save_file(t, '$OUT/mtp_chain.safetensors', metadata={'format': 'pt'})"
cp /tmp/chain/model.safetensors models/flashlane-tiny/model.safetensors
sha256sum models/flashlane-tiny/model.safetensors | tee $OUT/model.sha256
bench/gpu_tests.sh /tmp/gpu_tests > /tmp/gpu_tests.log 2>&1
cat /tmp/gpu_tests/summary.txt; echo "tests at $(( $(date +%s) - T0 )) s"
tar -C /tmp -cJf $OUT/gpu_tests.tar.xz gpu_tests gpu_tests.log
MODEL=models/flashlane-tiny FLASHLANE=$FL BENCH_ARGS="--device cuda" TASKS=counting \
    DRAFTS="none mtp:3" REPS=3 timeout 120 bench/mtp_speedup.sh /tmp/mtp > $OUT/mtp_speedup.txt 2>&1
echo "mtp rc=$? at $(( $(date +%s) - T0 )) s"; tail -6 $OUT/mtp_speedup.txt
