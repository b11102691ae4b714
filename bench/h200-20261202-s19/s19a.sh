#!/usr/bin/env bash
# Session 19, call 1 (device time was scarce: one call does it all): the default model's stage 4l
# training, with the GPU tests beside it for its first minutes (they check bits, not time); the
# parity fixture of the new model (tools/fixtures/default_model.py, so it can ship without
# another call); then, the GPU to itself, the tiled kernel's split once a block against the old
# way (one binary, FLASHLANE_MATMUL_SPLIT_ONCE=0) and sampled streams against greedy ones.
set -u
T0=$(date +%s)
at() { echo "$* at $(( $(date +%s) - T0 )) s"; }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
mkdir -p /tmp/s4l_out
STAGE_OUT=/tmp/s4l_out/s4l timeout 400 bash bench/h200-20261202-s19/s19_stage4l.sh > /tmp/s4l_out/stdout.txt 2>&1 &
TRAIN=$!
SETTINGS="" TESTS_SECONDS=230 timeout 240 bench/gpu_session.sh $OUT
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
wait $TRAIN; at "training rc=$?"; tail -3 /tmp/s4l_out/stdout.txt
S=/tmp/s4l_out/s4l
if [ -f $S/model.safetensors.part-aa ]; then
  cat $S/model.safetensors.part-* > /tmp/m.safetensors
  xz -T16 -6 -c /tmp/m.safetensors | split -b 15M - $OUT/s4l_model.xz.part-
  rm $S/model.safetensors.part-*
  cp /tmp/m.safetensors models/flashlane-tiny/model.safetensors
  cp $S/config.json models/flashlane-tiny/config.json
  timeout 90 python3 tools/fixtures/default_model.py > /tmp/s4l_out/fixture_log.txt 2>&1
  at "fixture rc=$?"
  tar -C tests/fixtures -cJf $OUT/s4l_fixture.tar.xz flashlane_tiny
fi
tar -C /tmp/s4l_out -cJf $OUT/s4l.tar.xz .
left=$(( 585 - ($(date +%s) - T0) ))
if [ $left -gt 100 ]; then
  SETTINGS="base:FLASHLANE_AB=1 off:FLASHLANE_MATMUL_SPLIT_ONCE=0" ROUNDS=2 STREAMS=1,64 timeout $(( left - 60 )) \
    bench/gpu_ab.sh /tmp/ab-4b qwen3-4b $FL > /dev/null 2>&1
  at "A/B rc=$?"; cat /tmp/ab-4b/ab.txt 2>/dev/null | tee $OUT/ab_split_once_4b.txt
fi
d=$(mktemp -d); cp bench/shapes/qwen3-4b/config.json $d/
for s in "--temperature 0" "--temperature 1" "--temperature 0.6 --top-k 20 --top-p 0.95"; do
  [ $(( $(date +%s) - T0 )) -gt 560 ] && break
  echo "== $s" >> $OUT/sampled.txt
  timeout $(( 590 - ($(date +%s) - T0) )) $FL bench --device cuda --model $d --load-format dummy --streams 1,64 \
    --prompt-tokens 128 --new-tokens 64 $s >> $OUT/sampled.txt 2>&1
done
cat $OUT/sampled.txt
at total
