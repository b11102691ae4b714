#!/usr/bin/env bash
# On the GPU machine, from the repository root: runs the six GPU test binaries packed by
# bench/pack_gpu_tests.sh, one after another, each failing (not skipping) without a device.
#
#   bench/gpu_tests.sh OUT_DIR        (carry bench/peers/gpu-tests.tar.xz)
#
# Writes each binary's log and summary.txt (rc, seconds, its result line) to OUT_DIR.
set -u
out=${1:?usage: bench/gpu_tests.sh OUT_DIR}
mkdir -p "$out"
bin=$(mktemp -d)
tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.txt" 2>&1
: >"$out/summary.txt"
for t in backend_cuda gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults; do
  start=$(date +%s)
  FLASHLANE_REQUIRE_GPU=1 timeout 300 "$bin/$t" --test-threads 1 >"$out/$t.log" 2>&1
  rc=$?
  echo "$t rc=$rc $(($(date +%s) - start))s $(grep 'test result' "$out/$t.log" | tail -1)" >>"$out/summary.txt"
done
cat "$out/summary.txt"
! grep -qv ' rc=0 ' "$out/summary.txt"
