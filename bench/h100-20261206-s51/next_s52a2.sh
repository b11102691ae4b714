#!/usr/bin/env bash
# Prepared in session 51 (not run), right after next_s52a.sh passed on the same machine: the five
# whole-model test binaries at the defaults (with the default model shipped in session 51, not
# yet run on a GPU) and with all of session 51's switches on (FLASHLANE_MOE_SUM_IN_DOWN=1,
# FLASHLANE_MOE_ROUTE_IN_FRONT=1, FLASHLANE_MATMUL_SWAP_ROWS=8): alone = batched = moved = with
# drafts, bit for bit; one- and two-row rounds take the new paths, larger ones the old.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default model moved out of
# the tree for the call); ~280 s on an H100 with the PTX cache of next_s52a.sh.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
TESTS="gpu_target gpu_conformance gpu_dense gpu_fixtures gpu_faults" TEST_TIMEOUT=120 \
  SETTINGS="base:FLASHLANE_AB=1 all:FLASHLANE_MOE_SUM_IN_DOWN=1,FLASHLANE_MOE_ROUTE_IN_FRONT=1,FLASHLANE_MATMUL_SWAP_ROWS=8" bench/gpu_tests.sh /tmp/tests > /dev/null 2>&1
el "whole-model tests rc=$?"; cat /tmp/tests/summary.txt | tee $OUT/tests_summary.txt
tar -C /tmp/tests -cJf $OUT/tests_logs.tar.xz .
