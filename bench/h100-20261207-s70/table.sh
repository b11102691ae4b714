#!/usr/bin/env bash
# Session 70's second call, on the same warm machine as `tests.sh`: session 68's same-run
# llama.cpp table (Qwen3-4B and -8B after 128-token prompts, ROUNDS rounds, default 1).
# Carry bench/peers/{flashlane.xz,llama.cpp.tar.xz}; limit 600. COMMIT names the binary's commit.
set -u
T0=$(date +%s)
. bench/device_ab.sh
LIMIT=$(( ${LIMIT:-590} - 10 )) ROUNDS=${ROUNDS:-1} COMMIT=${COMMIT:?set COMMIT} \
  bash bench/h100-20261207-s68/next_table.sh
