#!/usr/bin/env bash
# Session 19, call 1: the GPU tests at the commit built, then the default model's stage 4l
# training with the GPU to itself (its outputs packed into three files), then, in what time is
# left, the kernel timings (MMT_SPLIT_ONCE off, the probes, the depths).
set -u
T0=$(date +%s)
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
SETTINGS="" TESTS_SECONDS=185 timeout 195 bench/gpu_session.sh $OUT
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
mkdir -p /tmp/s4l_out
STAGE_OUT=/tmp/s4l_out/s4l timeout 385 bash bench/h200-20261202-s19/s19_stage4l.sh > /tmp/s4l_out/stdout.txt 2>&1
echo "training rc=$? at $(( $(date +%s) - T0 )) s"; tail -4 /tmp/s4l_out/stdout.txt
S=/tmp/s4l_out/s4l
if [ -f $S/model.safetensors.part-aa ]; then
  cat $S/model.safetensors.part-* > /tmp/m.safetensors
  xz -T16 -6 -c /tmp/m.safetensors | split -b 15M - $OUT/s4l_model.xz.part-
  rm $S/model.safetensors.part-*
fi
tar -C /tmp/s4l_out -cJf $OUT/s4l.tar.xz .
left=$(( 585 - ($(date +%s) - T0) ))
mkdir -p /tmp/bins && tar -C /tmp/bins -xJf bench/peers/gpu-tests.tar.xz
[ $left -gt 30 ] && timeout $left /tmp/bins/backend_cuda --ignored kernel_define_times --nocapture --test-threads 1 > $OUT/timings.txt 2>&1
echo "timings rc=$? at $(( $(date +%s) - T0 )) s"
echo "total $(( $(date +%s) - T0 )) s"
