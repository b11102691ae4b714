#!/usr/bin/env bash
# Session 18, call 1: GPU tests (as built; deep + FP8 fit on), kernel timings (depths, launch
# bounds, x ahead), A/B of the deep kernels on the Qwen3-4B shape.
set -u
T0=$(date +%s)
xz -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
SETTINGS="base:FLASHLANE_AB=1 new:FLASHLANE_MATMUL_DEEP=1,FLASHLANE_FP8_FIT=1" TESTS_SECONDS=130 \
TIMINGS="kernel_define_times matmul_kernel_times" TIMING_SECONDS=165 \
AB="base:FLASHLANE_AB=1 deep:FLASHLANE_MATMUL_DEEP=1" AB_SHAPES="qwen3-4b" AB_STREAMS=1,8,64 AB_SECONDS=110 \
  timeout 575 bench/gpu_session.sh $OUT
echo "total $(( $(date +%s) - T0 )) s"
