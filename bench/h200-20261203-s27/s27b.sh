#!/usr/bin/env bash
# Session 27, call 3: the default model with its chain head trained again on 4p's trunk (stage
# 5c: the trunk bit for bit 4p's, the 41 mtp.* tensors new): every GPU test, then MTP's speed-up
# on counting at 1 and 8 streams, 2 and 3 drafts against none, three interleaved passes.
# Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz} with the default model moved out.
set -u
T0=$(date +%s)
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
sha256sum models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
bench/gpu_tests.sh /tmp/gpu_tests > /tmp/gpu_tests.log 2>&1
cat /tmp/gpu_tests/summary.txt; echo "tests at $(( $(date +%s) - T0 )) s"
tar -C /tmp -cJf $OUT/gpu_tests.tar.xz gpu_tests gpu_tests.log
MODEL=models/flashlane-tiny FLASHLANE=$FL BENCH_ARGS="--device cuda" TASKS=counting \
    DRAFTS="none mtp:2 mtp:3" REPS=3 timeout 150 bench/mtp_speedup.sh /tmp/mtp > $OUT/mtp_speedup.txt 2>&1
echo "mtp rc=$? at $(( $(date +%s) - T0 )) s"; tail -8 $OUT/mtp_speedup.txt
