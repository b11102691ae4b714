#!/usr/bin/env bash
# Session 22, call 1: llama.cpp built and the Qwen3-0.6B / Qwen3-8B checkpoints made in the
# background (for call 2's same-run comparison); meanwhile the attention and matmul kernel tests
# (also with the k split on, so that Auto's own choice splits), the tensor-core probe (does a
# wgmma sum as mma.sync does?), and every GPU test with both prepared switches on
# (FLASHLANE_MATMUL_SPLIT_K=1, FLASHLANE_ATTENTION_FEW_WARPS=1). The binaries carry the one-head
# attention order (bench/h200-20261202-s21/attention-one-head-order.diff) applied.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
FLASHLANE_COMMIT=prep nice -n 15 bench/gpu_vs_llamacpp.sh $OUT/prep --shapes qwen3-0.6b,qwen3-8b \
  --prepare-only --keep-models --flashlane $FL > /tmp/prep.log 2>&1 &
PREP=$!
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
timeout 150 $B/backend_cuda attention matmul --test-threads 1 > $OUT/kernel_tests.txt 2>&1
echo "kernel tests rc=$? at $(el) s"; grep "test result\|panicked" $OUT/kernel_tests.txt
FLASHLANE_MATMUL_SPLIT_K=1 timeout 100 $B/backend_cuda matmul --test-threads 1 > /tmp/ksplit.txt 2>&1
echo "matmul tests, split k on, rc=$? at $(el) s"; grep "test result\|panicked" /tmp/ksplit.txt; { echo "== split k on"; cat /tmp/ksplit.txt; } >> $OUT/kernel_tests.txt
timeout 60 $B/backend_cuda --ignored tensor_core_numerics_probe --nocapture --test-threads 1 > $OUT/tc_probe.txt 2>&1
echo "tensor-core probe rc=$? at $(el) s"; grep -v "^$" $OUT/tc_probe.txt | tail -8
SETTINGS="on:FLASHLANE_MATMUL_SPLIT_K=1,FLASHLANE_ATTENTION_FEW_WARPS=1" TESTS_SECONDS=240 \
  timeout 245 bench/gpu_session.sh $OUT/session
grep -h "panicked\|FAILED" /tmp/tmp.*/tests/*.log /tmp/tmp.*/tests/*/*.log 2>/dev/null | head -8
echo "tests at $(el) s; waiting for the llama.cpp build"
while kill -0 $PREP 2>/dev/null && [ $(el) -lt 585 ]; do sleep 2; done
tail -5 /tmp/prep.log
echo "total $(el) s"
