#!/usr/bin/env bash
# Session 21, call 3: llama.cpp built and the 4B / A3B-slice checkpoints made in the background
# (for call 4's same-run comparison), and meanwhile: the attention and matmul kernel tests (the
# grouped attention = the per-head one, bit for bit), the default model's greedy replies with
# logprobs from the binary before this session (d317402) and now (the same bits?), old against
# new end to end (4B, A3B slice), and the GPU tests.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
OLD=/tmp/fl_old; xz -dc bench/peers/flashlane_old.xz > $OLD; chmod +x $OLD
NEW=/tmp/fl_new; xz -dc bench/peers/flashlane.xz > $NEW; chmod +x $NEW
FLASHLANE_COMMIT=prep nice -n 15 bench/gpu_vs_llamacpp.sh $OUT/prep --shapes qwen3-4b,qwen3-next-a3b-slice \
  --prepare-only --keep-models --flashlane $NEW > /tmp/prep.log 2>&1 &
PREP=$!
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
timeout 120 $B/backend_cuda attention matmul --test-threads 1 > $OUT/kernel_tests.txt 2>&1
echo "attention+matmul tests rc=$? at $(el) s"; grep "test result" $OUT/kernel_tests.txt
OUT=$OUT bash bench/h200-20261202-s20/s20e_bits.sh > /dev/null 2>&1
for n in 1 2; do python3 - $n <<'PY' | tee -a $OUT/bits.txt
import json, sys
n = sys.argv[1]
a, b = (json.load(open(f"/tmp/reply_{w}_{n}.json"))["choices"] for w in ("old", "new"))
print(f"reply {n}: choices old vs new {'SAME' if a == b else 'DIFFER'}; {len(a[0]['logprobs']['content'])} tokens")
PY
done
echo "bits at $(el) s"
for shape in qwen3-4b qwen3-next-a3b-slice; do
  ROUNDS=1 STREAMS=1,64 timeout 200 bench/gpu_ab.sh /tmp/ab-$shape $shape $OLD $NEW > /dev/null 2>&1
  echo "A/B $shape rc=$? at $(el) s"; cat /tmp/ab-$shape/ab.txt | tee -a $OUT/ab.txt
done
SETTINGS="" TESTS_SECONDS=200 timeout 205 bench/gpu_session.sh $OUT/session
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
echo "tests at $(el) s; waiting for the llama.cpp build"
while kill -0 $PREP 2>/dev/null && [ $(el) -lt 585 ]; do sleep 2; done
tail -5 /tmp/prep.log; cp /tmp/prep.log $OUT/
echo "total $(el) s"
