#!/usr/bin/env bash
# Session 21, call 2: the tiled matmul over rows split once (`split_rows`): its kernel tests
# (tiled = wide = narrow bit for bit), its times against the other kernels (matmul_kernel_times),
# then old (d317402) against new end to end on the 4B shape and the A3B slice, then the GPU tests.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
OLD=/tmp/fl_old; xz -dc bench/peers/flashlane_old.xz > $OLD; chmod +x $OLD
NEW=/tmp/fl_new; xz -dc bench/peers/flashlane.xz > $NEW; chmod +x $NEW
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
timeout 120 $B/backend_cuda matmul --test-threads 1 > $OUT/matmul_tests.txt 2>&1
echo "matmul tests rc=$? at $(el) s"; tail -4 $OUT/matmul_tests.txt
timeout 150 $B/backend_cuda --ignored matmul_kernel_times --nocapture --test-threads 1 > $OUT/matmul_times.txt 2>&1
echo "times rc=$? at $(el) s"
grep -E "gate_up rows  (512|2048|8192)|4B qkv rows  8192|4B down rows  8192" $OUT/matmul_times.txt | sed 's/Deep.*//' | cut -c1-400
for shape in qwen3-4b qwen3-next-a3b-slice; do
  ROUNDS=1 STREAMS=1,64 timeout 200 bench/gpu_ab.sh /tmp/ab-$shape $shape $OLD $NEW > /dev/null 2>&1
  echo "A/B $shape rc=$? at $(el) s"; cat /tmp/ab-$shape/ab.txt | tee -a $OUT/ab.txt
done
left=$(( 585 - $(el) ))
if [ $left -gt 60 ]; then
  SETTINGS="" TESTS_SECONDS=$(( left - 10 )) timeout $left bench/gpu_session.sh $OUT/session
  grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
fi
echo "total $(el) s"
