#!/usr/bin/env bash
# Session 19, call 2: A/B of the tiled kernel's split once a block (one binary, FLASHLANE_MATMUL_SPLIT_ONCE=0
# the old way) on the Qwen3-4B and A3B-slice shapes; where a Qwen3-4B 128-token prompt goes
# (ncu, the prompt's step); the kernel timings if call 1 left them out (RUN_TIMINGS=1).
set -u
T0=$(date +%s)
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
STEPS=prompt PROMPT_TOKENS=128 NEW_TOKENS=4 RUN_TIMEOUT=120 timeout 130 bench/gpu_profile.sh /tmp/prof qwen3-4b $FL 1 > $OUT/profile_4b_prompt.txt 2>&1
echo "profile at $(( $(date +%s) - T0 )) s"
AB="base:FLASHLANE_AB=1 off:FLASHLANE_MATMUL_SPLIT_ONCE=0" AB_SHAPES="qwen3-4b qwen3-next-a3b-slice" AB_STREAMS=1,64 \
  AB_SECONDS=110 FLASHLANE_BIN=$FL TIMINGS="${RUN_TIMINGS:+kernel_define_times}" TIMING_SECONDS=200 \
  timeout $(( 570 - ($(date +%s) - T0) )) bench/gpu_session.sh $OUT
# Sampled streams against greedy ones on the Qwen3-4B shape (vocabulary 151,936): greedy copies
# ids back, sampled rounds copy logits and draw on the host.
d=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $d/
for s in "--temperature 0" "--temperature 1" "--temperature 0.6 --top-k 20 --top-p 0.95"; do
  [ $(( $(date +%s) - T0 )) -gt 520 ] && break
  echo "== $s" >> $OUT/sampled.txt
  timeout 60 $FL bench --device cuda --model $d --load-format dummy --streams 1,8,64 --prompt-tokens 128 \
    --new-tokens 64 $s >> $OUT/sampled.txt 2>&1
done
cat $OUT/sampled.txt
tar -C /tmp/prof -cJf $OUT/prof.tar.xz . 2>/dev/null
echo "total $(( $(date +%s) - T0 )) s"
