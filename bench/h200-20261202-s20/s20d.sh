#!/usr/bin/env bash
# Session 20, call 1: (1) the DeltaNet recurrence in stages of 16 tokens keeps the bits
# (a greedy reply's logprobs on the default model from the binary before it and after it, byte
# for byte); (2) the GPU tests (draws on the GPU, pinned logits, staged DeltaNet; 4l weights);
# (3) sampled streams against greedy ones (Qwen3-4B shape, dummy weights), with where a round's
# time goes; (4) the A3B slice's prompts and decode, before against after the staged DeltaNet.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl_new; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
FLO=/tmp/fl_old; xz -dc bench/peers/flashlane_old.xz > $FLO; chmod +x $FLO
TEXT=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog %d.' % i for i in range(40)]))")
BODY=$(python3 -c "import json,sys; print(json.dumps({'model':'flashlane-tiny','messages':[{'role':'user','content':sys.argv[1]}],'max_tokens':48,'temperature':0,'logprobs':True,'top_logprobs':5}))" "$TEXT")
for which in old new; do
  B=$FL; [ $which = old ] && B=$FLO
  $B serve --device cuda --port 18111 > $OUT/serve_$which.log 2>&1 &
  P=$!
  for i in $(seq 1 60); do curl -sf localhost:18111/health > /dev/null && break; sleep 1; done
  curl -s localhost:18111/v1/chat/completions -H 'content-type: application/json' -d "$BODY" > /tmp/reply_$which.json
  kill $P; wait $P 2>/dev/null
done
{ echo "logprobs old vs new: $(cmp -s /tmp/reply_old.json /tmp/reply_new.json && echo SAME || echo DIFFER)";
  md5sum /tmp/reply_old.json /tmp/reply_new.json; head -c 300 /tmp/reply_new.json; echo; } | tee $OUT/bits.txt
echo "$(el) s: bits done"
SETTINGS="" TESTS_SECONDS=230 timeout 235 bench/gpu_session.sh $OUT
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
d=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $d/
for s in "--temperature 1" "--temperature 0.6 --top-k 20 --top-p 0.95" "--temperature 0"; do
  [ $(el) -gt 420 ] && break
  echo "== $s" >> $OUT/sampled.txt
  timeout $(( 440 - $(el) )) $FL bench --device cuda --model $d --load-format dummy --streams 1,64 \
    --prompt-tokens 128 --new-tokens 64 $s 2>&1 | tail -3 >> $OUT/sampled.txt
done
cat $OUT/sampled.txt
a=$(mktemp -d); cp bench/shapes/qwen3-next-a3b-slice/config.json $a/
for r in 1 2; do
  for which in old new; do
    [ $(el) -gt 540 ] && break
    B=$FL; [ $which = old ] && B=$FLO
    echo "== a3b slice $which round $r" >> $OUT/deltanet_ab.txt
    timeout $(( 580 - $(el) )) $B bench --device cuda --model $a --load-format dummy --streams 1,64 \
      --prompt-tokens 128 --new-tokens 32 2>&1 | tail -2 >> $OUT/deltanet_ab.txt
  done
done
cat $OUT/deltanet_ab.txt
echo "total $(el) s"
