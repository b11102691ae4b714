#!/usr/bin/env bash
# Session 22, call 4: the default model's stage 4m (its parity fixture made again), the k split and the few-warp attention on by default where call 2 found
# them faster (48-64 rows of wide matrices; heads of at most 128), the one-head attention order
# kept: every GPU test at this commit, then the defaults against both switches off
# (FLASHLANE_MATMUL_SPLIT_K=0, FLASHLANE_ATTENTION_FEW_WARPS=0) on the Qwen3-0.6B, -4B and -8B
# shapes and the A3B slice.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
# The default model is stage 4m here: its parity fixture made again by transformers first.
python3 tools/fixtures/default_model.py > /tmp/fixture.log 2>&1
echo "fixture rc=$? at $(el) s"; tail -3 /tmp/fixture.log
tar -C tests/fixtures -cf $OUT/fixture_flashlane_tiny.tar flashlane_tiny
SETTINGS="" TESTS_SECONDS=200 timeout 205 bench/gpu_session.sh $OUT/session
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log 2>/dev/null | head -8
echo "tests at $(el) s"
for shape in qwen3-4b qwen3-next-a3b-slice qwen3-0.6b qwen3-8b; do
  rounds=1; [ $shape = qwen3-4b ] && rounds=2
  SETTINGS="new:FLASHLANE_AB=1 off:FLASHLANE_MATMUL_SPLIT_K=0,FLASHLANE_ATTENTION_FEW_WARPS=0" \
    ROUNDS=$rounds STREAMS=1,32,64 timeout 150 bench/gpu_ab.sh /tmp/ab-$shape $shape $FL > /dev/null 2>&1
  echo "A/B $shape rc=$? at $(el) s"; { echo "== $shape"; cat /tmp/ab-$shape/ab.txt; } | tee -a $OUT/ab.txt
  [ $(el) -gt 330 ] && break
done
# The MTP head's speed-up on counting with stage 4m (1 and 8 streams, 3 drafts against none).
FLASHLANE=$FL MODEL=models/flashlane-tiny BENCH_ARGS="--device cuda" TASKS=counting STREAMS=1,8 \
  DRAFTS="none mtp:3" REPS=1 COMMIT=${COMMIT:-?} timeout 90 bench/mtp_speedup.sh /tmp/mtp 2>/dev/null | tail -8 | tee -a $OUT/ab.txt
echo "mtp at $(el) s"
# Where a 1-stream token and a 64-stream round of the 8B shape go (ncu per kernel), and a
# 1-stream token of the A3B slice, as far as the call's time allows.
for job in "qwen3-8b 1" "qwen3-next-a3b-slice 1" "qwen3-8b 64"; do
  set -- $job
  [ $(el) -gt 430 ] && break
  RUN_TIMEOUT=80 timeout 90 bench/gpu_profile.sh /tmp/prof $1 $FL $2 > /dev/null 2>&1
  echo "profile $1 at $2 streams rc=$? at $(el) s"; cp /tmp/prof/$1.built.s$2.txt $OUT/profile_$1_s$2.txt 2>/dev/null
  head -5 /tmp/prof/$1.built.s$2.txt 2>/dev/null
done
echo "total $(el) s"
