#!/usr/bin/env bash
# Session 20, call 1's second command (the machine still warm): the staged DeltaNet keeps the
# bits — a greedy reply with logprobs from `serve --device cuda` on the default model, the binary
# before the change (flashlane_old.xz) and after (flashlane.xz); the replies' `choices` compared
# by a third command (call1/bits_choices.txt: the whole JSON differs in `created`).
set -u
FL=/tmp/fl_new; FLO=/tmp/fl_old
[ -x $FL ] || { xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL; }
[ -x $FLO ] || { xz -dc bench/peers/flashlane_old.xz > $FLO; chmod +x $FLO; }
[ -f models/flashlane-tiny/model.safetensors ] || xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
TEXT=$(python3 -c "print(' '.join(['the quick brown fox jumps over the lazy dog %d.' % i for i in range(40)]))")
for which in old new; do
  B=$FL; [ $which = old ] && B=$FLO
  $B serve --device cuda --port 18112 > $OUT/serve_$which.log 2>&1 &
  P=$!
  for i in $(seq 1 60); do curl -sf localhost:18112/health > /dev/null && break; sleep 1; done
  for n in 1 2; do
    BODY=$(python3 -c "import json,sys; print(json.dumps({'model':'flashlane-tiny','messages':[{'role':'user','content':sys.argv[1]}],'max_tokens':48,'temperature':0,'logprobs':True,'top_logprobs':5}))" "$([ $n = 1 ] && echo "$TEXT" || echo 'Count from 1 to 30.')")
    curl -s localhost:18112/v1/chat/completions -H 'content-type: application/json' -d "$BODY" > /tmp/reply_${which}_$n.json
  done
  kill $P; wait $P 2>/dev/null
done
for n in 1 2; do echo "reply $n old vs new: $(cmp -s /tmp/reply_old_$n.json /tmp/reply_new_$n.json && echo SAME || echo DIFFER)"; md5sum /tmp/reply_old_$n.json /tmp/reply_new_$n.json; head -c 400 /tmp/reply_new_$n.json; echo; done | tee $OUT/bits.txt
