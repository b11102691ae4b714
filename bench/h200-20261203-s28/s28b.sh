#!/usr/bin/env bash
# Session 28, last call (grown from session 27's prepared next_s28b.sh, at 27279b5): for the trunk
# shipped from this session's stages (carried as tiny_model.xz, with 5c's head as it came from
# average_models.py), the MTP head trained again for chained drafts (stage 5c's command,
# `train_mtp_chain.py`), then the GPU tests and MTP's speed-up with the head in place. To fit the
# device time left, backend_cuda's kernel tests run while the head trains, on the same trunk with
# 5c's head (they compare the GPU with the CPU and batch with batch: what they check holds for any
# head); the five model-level test binaries and the speed-up run after it, on the final file.
# Brings back the head's mtp.* tensors (spliced into the trunk's file here; the file's sha256
# must then match) and every log. CHAIN_S (default 90, 5c's) is the head's training time.
# Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz}, the default model moved out.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
sha256sum models/flashlane-tiny/model.safetensors
cp -r models/flashlane-tiny /tmp/trunk
PYTHONUNBUFFERED=1 timeout 240 python3 tools/train_tiny/train_mtp_chain.py --init /tmp/trunk \
    --out /tmp/chain --chain 4 --step-weights 1,1,1,1 --steps 700 --train-seconds ${CHAIN_S:-90} --mix skills \
    --code-mb 4 --per-package-mb 1 --count-share 0.45 > $OUT/chain_log.txt 2>&1 &
chain=$!
TESTS=backend_cuda bench/gpu_tests.sh /tmp/gpu_tests_kernels > /tmp/gpu_tests_kernels.log 2>&1
el "kernel tests: $(cat /tmp/gpu_tests_kernels/summary.txt)"
wait $chain
el "chain rc=$?"
# (Moved here after the call, which ran it after the model tests: the kernel tests' logs come back
# even when the head fails.)
tar -C /tmp -cJf $OUT/gpu_tests_kernels.tar.xz gpu_tests_kernels gpu_tests_kernels.log
grep -E '"?(before|after)' $OUT/chain_log.txt | cut -c1-400
[ -f /tmp/chain/model.safetensors ] || { echo "no chain head: the model tests are not run"; exit 1; }
cp /tmp/chain/chain_eval.json $OUT/
python3 -c "
from safetensors.torch import load_file, save_file
t = {k: v for k, v in load_file('/tmp/chain/model.safetensors').items() if k.startswith('mtp.')}
save_file(t, '$OUT/mtp_chain.safetensors', metadata={'format': 'pt'})"
cp /tmp/chain/model.safetensors models/flashlane-tiny/model.safetensors
sha256sum models/flashlane-tiny/model.safetensors | tee $OUT/model.sha256
TESTS="gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults" bench/gpu_tests.sh /tmp/gpu_tests > /tmp/gpu_tests.log 2>&1
el "model tests"; cat /tmp/gpu_tests/summary.txt
tar -C /tmp -cJf $OUT/gpu_tests.tar.xz gpu_tests gpu_tests.log
MODEL=models/flashlane-tiny FLASHLANE=$FL BENCH_ARGS="--device cuda" TASKS=counting \
    DRAFTS="none mtp:2 mtp:3" REPS=3 timeout 100 bench/mtp_speedup.sh /tmp/mtp > $OUT/mtp_speedup.txt 2>&1
el "mtp rc=$?"; tail -8 $OUT/mtp_speedup.txt
