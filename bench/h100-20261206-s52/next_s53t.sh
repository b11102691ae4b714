#!/usr/bin/env bash
# Prepared in session 52 (not run): the whole kernel test binary at the defaults (never run whole
# since `55a2dd9`; session 52 ran its swapped-chain, norm-twin and MoE tests at the new defaults),
# alone in its call: a fresh machine compiles every kernel (~350 s cold).
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz} (the default model moved out of the tree);
# ~420 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
TESTS=backend_cuda TEST_TIMEOUT=560 bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "backend_cuda rc=$?"; cat /tmp/tests/summary.txt | tee $OUT/tests_summary.txt
grep -E "FAILED|panicked" /tmp/tests/backend_cuda.log | head -20
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
