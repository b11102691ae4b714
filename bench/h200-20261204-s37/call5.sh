#!/usr/bin/env bash
# Session 37, call 5: every GPU test binary at the session's last CUDA-touching state (the CUDA
# code of 608d3d1; backend-cpu's widened weights of eec10b4 beside it).
# Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz}.
set -u
bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
echo "tests rc=$?"; cat /tmp/tests/summary.txt | tee $OUT/tests_summary.txt
cp /tmp/tests/gpu.txt $OUT/
grep -h -B 2 -A 20 "panicked\|FAILED" /tmp/tests/*.log | head -80 > $OUT/failures.txt
