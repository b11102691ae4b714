#!/usr/bin/env bash
# Session 31, call 3 (the machine still warm from call 2, its llama.cpp build and checkpoints
# kept): flashlane 0cb43d3 against llama.cpp, same run, same weights, Qwen3-0.6B and Qwen3-4B.
# Carry bench/peers/{flashlane.xz,llama.cpp.tar.xz}.
set -u
. bench/unpack_peers.sh
FLASHLANE_COMMIT=0cb43d3 bench/gpu_vs_llamacpp.sh $OUT/vs --shapes qwen3-0.6b,qwen3-4b \
  --rounds 2 --keep-models --deadline 560 --flashlane $FL 2>&1 | tail -40
