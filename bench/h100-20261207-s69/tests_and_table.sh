#!/usr/bin/env bash
# For an H200 (none since session 60): the five whole-model GPU test binaries at the packs'
# commit (`whole_model_tests`, ~115 s in parallel on an H100), then session 68's same-run
# llama.cpp table (`bench/h100-20261207-s68/next_table.sh`: Qwen3-4B and -8B after 128-token
# prompts, one round unless ROUNDS is set; the 4,096-token table only if time is left) in the
# time left. Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz,flashlane.xz,llama.cpp.tar.xz}
# (~62 MB); limit 600. COMMIT names the binaries' commit.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
room 200 whole_model_tests && whole_model_tests
LIMIT=$(( ${LIMIT:-580} - $(date +%s) + T0 - 10 )) ROUNDS=${ROUNDS:-1} COMMIT=${COMMIT:?set COMMIT} \
  bash bench/h100-20261207-s68/next_table.sh
