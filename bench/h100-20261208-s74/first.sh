#!/usr/bin/env bash
# Session 74's first call, on either card: the kernel tests whose default-walk cases session 73's
# re-read changed (`cdcd088`, never run on a GPU: the matmul test asserts no plain split walks by
# default; the SwiGLU test asserts the wide blocks run from 49 rows and never below), then the
# same-run llama.cpp table at the default (session 68's next_table.sh: Qwen3-4B and -8B after
# 128-token prompts; the last table, session 72's, ran before the shared softmax).
# Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,llama.cpp.tar.xz}; COMMIT names the packs'.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-580}
. bench/device_ab.sh
room 130 "walk kernel tests" && TEST_THREADS=2 kernel_tests walk 120 \
  wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits
LIMIT=$(( LIMIT - $(date +%s) + T0 )) ROUNDS=${ROUNDS:-1} COMMIT=${COMMIT:?set COMMIT} \
  bash bench/h100-20261207-s68/next_table.sh
exit 0
