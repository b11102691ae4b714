#!/usr/bin/env bash
# Session 64's last device-seconds: only the tensor-core attention's kernel tests at `78da2cd`
# (the restructured prep twin and merge: bits against the prep apart and backend-cpu).
set -u
. bench/device_ab.sh
gpu_info
TEST_THREADS=4 kernel_tests mma 105 attention_of prep_in_attention_gives
exit 0
