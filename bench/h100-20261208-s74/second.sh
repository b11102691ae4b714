#!/usr/bin/env bash
# Session 74's second call (warm H100): the 64-row round's kernel timeline at the default on
# Qwen3-4B and -8B (after the shared softmax), then ncu of x's splits (ncu_walk.sh `split`).
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-200}
. bench/device_ab.sh
room 45 "timeline 4B" && timeline n4b qwen3-4b 64 "default:FLASHLANE_AB=1" $FL
room 60 "timeline 8B" && timeline n8b qwen3-8b 64 "default:FLASHLANE_AB=1" $FL
room 40 "ncu split" && ONLY=split bash bench/h100-20261208-s74/ncu_walk.sh
exit 0
