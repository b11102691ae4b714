#!/usr/bin/env bash
# Session 48, call 5: every GPU test binary at the commit the packs were built from (the two-block
# recurrence now the default, the value-major partials switch dropped). Carry
# bench/peers/{gpu-tests.tar.xz,tiny_model.xz} (the default model moved out of the tree).
set -u
T0=$(date +%s)
timeout 320 bench/gpu_tests.sh $OUT/tests > /dev/null 2>&1
echo "[$(( $(date +%s) - T0 )) s] tests rc=$?"; cat $OUT/tests/summary.txt
tar -C $OUT -cJf $OUT/tests.tar.xz tests && rm -rf $OUT/tests
