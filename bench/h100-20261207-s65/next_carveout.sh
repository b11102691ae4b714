#!/usr/bin/env bash
# Prepared in session 65 (not run): one shared-memory carve-out for every kernel
# (FLASHLANE_SHARED_CARVEOUT=100, a hint: the same bits) against the driver's choice by each
# kernel's shared memory. Our reading, not measured: between launches of different carve-outs a
# multiprocessor drains before it reconfigures, so the next kernel's blocks cannot start beside
# the last one's (programmatic dependent launch) — which would tax the tensor-core attention's
# launches (45-103 KiB) between the one-row matmuls (little), and every 64-stream split (98 KiB)
# beside the norms and folds. Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz,flashlane.xz}
# (the default model moved out); limit 600.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
S="default:FLASHLANE_AB=1 c100:FLASHLANE_SHARED_CARVEOUT=100"
room 90 cv_4b && ab cv_4b qwen3-4b 1,8,64 "$S" $FL
M="mma:FLASHLANE_ATTENTION_MMA=1 mma100:FLASHLANE_ATTENTION_MMA=1,FLASHLANE_SHARED_CARVEOUT=100"
room 60 cv_4b_mma && ab cv_4b_mma qwen3-4b 1,8 "$M" $FL
room 60 cv_06b && ab cv_06b qwen3-0.6b 1,8,64 "$S" $FL
room 60 cv_a3b && ab cv_a3b qwen3-next-a3b-slice 1,64 "$S" $FL
TL="tl:FLASHLANE_TIMELINE=1,FLASHLANE_ATTENTION_MMA=1 tl100:FLASHLANE_TIMELINE=1,FLASHLANE_ATTENTION_MMA=1,FLASHLANE_SHARED_CARVEOUT=100"
room 50 cv_timeline && timeline cv1 qwen3-4b 1 "$TL" $FL
if room 120 cv_tests; then
  SETTINGS="c100:FLASHLANE_SHARED_CARVEOUT=100" PARALLEL=1 TESTS="gpu_target gpu_conformance gpu_dense" \
    TEST_TIMEOUT=110 bench/gpu_tests.sh /tmp/tests_cv > /dev/null 2>&1
  el "whole-model tests under the carve-out rc=$?"; tee $OUT/tests_summary_cv.txt < /tmp/tests_cv/summary.txt
fi
exit 0
