#!/usr/bin/env bash
# On the GPU machine, from the repository root: runs the six GPU test binaries packed by
# bench/pack_gpu_tests.sh, one after another, each failing (not skipping) without a device.
#
#   bench/gpu_tests.sh OUT_DIR        (carry bench/peers/gpu-tests.tar.xz)
#   SETTINGS="base:FLASHLANE_AB=1 nofit:FLASHLANE_MATMUL_FIT=0" bench/gpu_tests.sh OUT_DIR
#
# Writes each binary's log and summary.txt (rc, seconds, its result line) to OUT_DIR, or with
# SETTINGS (label:VAR=VALUE[,VAR=VALUE…], values without commas or spaces, as bench/gpu_ab.sh
# takes them: switches that keep the bits) the whole run once per setting into OUT_DIR/LABEL/,
# and every line into OUT_DIR/summary.txt. TESTS (default: all six) names the binaries to run;
# TEST_TIMEOUT (seconds a binary, 300 by default) bounds each: bound a call by it rather than by a
# `timeout` around this script, which would leave the binary it kills the script in running.
# PARALLEL=1 starts the binaries of a setting all at once instead: on a fresh machine each spends
# most of its minute compiling its kernels (NVRTC, then the driver's JIT: one core a module), so
# the 16 cores compile side by side; a binary that fails so runs again alone after them, and both
# results are kept (`rc=…` of the parallel run, then `alone rc=…`).
set -u
out=${1:?usage: bench/gpu_tests.sh OUT_DIR}
mkdir -p "$out"
# The default model, where a call moved it out of the tree and brought it packed.
. bench/unpack_peers.sh
bin=$(mktemp -d)
tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv >"$out/gpu.txt" 2>&1

# One binary `t` under `env SETTING` into LOG; its summary line to standard output.
run_one() {
  local t=$1 setting=$2 log=$3 start rc
  start=$(date +%s)
  env ${setting//,/ } FLASHLANE_REQUIRE_GPU=1 timeout "${TEST_TIMEOUT:-300}" "$bin/$t" --test-threads 1 >"$log" 2>&1
  rc=$?
  echo "rc=$rc $(($(date +%s) - start))s $(grep 'test result' "$log" | tail -1)"
}

# Runs the six binaries under `env SETTING` into DIR, appending to DIR/summary.txt.
run_all() {
  local dir=$1 setting=$2 t
  local tests=${TESTS:-backend_cuda gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults}
  mkdir -p "$dir"
  : >"$dir/summary.txt"
  if [ "${PARALLEL:-0}" != 1 ]; then
    for t in $tests; do
      echo "$t $(run_one "$t" "$setting" "$dir/$t.log")" >>"$dir/summary.txt"
    done
    return
  fi
  for t in $tests; do
    run_one "$t" "$setting" "$dir/$t.log" >"$dir/$t.line" &
  done
  wait
  for t in $tests; do
    local line
    line=$(cat "$dir/$t.line")
    case "$line" in
      "rc=0 "*) ;;
      *) line="$line; alone $(run_one "$t" "$setting" "$dir/$t.alone.log")" ;;
    esac
    echo "$t $line" >>"$dir/summary.txt"
    rm -f "$dir/$t.line"
  done
}

if [ -z "${SETTINGS:-}" ]; then
  run_all "$out" FLASHLANE_AB=1
else
  : >"$out/summary.txt.all"
  for setting in $SETTINGS; do
    label=${setting%%:*}
    run_all "$out/$label" "${setting#*:}"
    sed "s/^/$label /" "$out/$label/summary.txt" >>"$out/summary.txt.all"
  done
  mv "$out/summary.txt.all" "$out/summary.txt"
fi
cat "$out/summary.txt"
# Each binary passed: in its (parallel) run, or alone after a parallel run that failed.
! grep -v ' rc=0 ' "$out/summary.txt" | grep -qv 'alone rc=0 '

