#!/usr/bin/env bash
# Session 70's last ask, with ~300 device-seconds left after failed starts (calls.md): walk2.sh's
# A/B alone (Qwen3-4B, 64 streams, one interleaved round: the default, the TMA walk at depths 4
# and 8, and with blocks of 64 rows for o and down), then its kernel tests if time is left.
# Carry gpu-tests.tar.xz, tiny_model.xz, flashlane.xz; LIMIT ~170.
set -u
T0=$(date +%s)
. bench/device_ab.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv | tee $OUT/gpu.txt
SETTINGS="default:FLASHLANE_AB=1 tma:FLASHLANE_MATMUL_WALK=tma tma8:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_DEPTH=8 tma64:FLASHLANE_MATMUL_WALK=tma,FLASHLANE_MATMUL_WALK_ROWS=64" \
  STREAMS=64 NEW_TOKENS=64 ROUNDS=1 RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_4b qwen3-4b $FL > /dev/null 2>&1
el "A/B 4B rc=$?"; cat /tmp/ab_4b/ab.txt | tee -a $OUT/ab.txt
room 100 "walk kernel tests" && TEST_THREADS=3 kernel_tests walk 95 \
  wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits
exit 0
