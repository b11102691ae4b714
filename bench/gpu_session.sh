#!/usr/bin/env bash
# One device call's usual work on the GPU machine, each step under its own time limit, results
# in at most 8 files under OUT (the device tool brings back 8): the GPU tests (as bench/gpu_tests.sh,
# SETTINGS), the kernel timings (TIMINGS: ignored tests of the backend_cuda binary), an A/B of
# settings of one flashlane binary on dummy weights (AB, AB_SHAPES, AB_STREAMS), and per-kernel
# profiles (PROFILE_SHAPES, PROFILE_STREAMS). A step whose variable is empty is left out.
#
#   bench/gpu_session.sh OUT
#     SETTINGS="base:FLASHLANE_AB=1 nodeep:FLASHLANE_MATMUL_DEEP=0"    (GPU tests, once each;
#                                                 SETTINGS="" runs them once as built)
#     TIMINGS="matmul_kernel_times kernel_define_times"
#     AB="base:FLASHLANE_AB=1 nodeep:FLASHLANE_MATMUL_DEEP=0" AB_SHAPES="qwen3-4b qwen3-next-a3b-slice"
#     PROFILE_SHAPES="qwen3-next-80b-a3b-fp8" PROFILE_STREAMS=1,64 [PROFILE_SETTINGS="label:VAR=1 …"]
#       (STEPS=prompt PROMPT_TOKENS=128: the prompt's step instead, as bench/gpu_profile.sh)
#     FLASHLANE_BIN=/tmp/fl (default: unpacked from bench/peers/flashlane.xz)
#
# Before the call, here: bench/pack_gpu_tests.sh --flashlane, and carry bench/peers/gpu-tests.tar.xz
# and bench/peers/flashlane.xz (the tests need the default model in the tree: see DEVELOPERS).
# Writes OUT/summary.txt (every step's result and seconds, printed too), OUT/tests_summary.txt,
# OUT/timings.txt, OUT/ab.txt, OUT/profile.txt and OUT/raw.tar.xz (logs, JSON, CSV).
set -uo pipefail
out=${1:?usage: bench/gpu_session.sh OUT}
here=$(cd "$(dirname "$0")/.." && pwd)
cd "$here" || exit 1
work=$(mktemp -d)
mkdir -p "$out"
t0=$(date +%s)
step() { echo "$(($(date +%s) - t0)) s: $*" | tee -a "$out/summary.txt"; }

fl=${FLASHLANE_BIN:-}
if [ -z "$fl" ] && [ -f "$here/bench/peers/flashlane.xz" ]; then
  fl=$work/flashlane
  xz -dc "$here/bench/peers/flashlane.xz" >"$fl" && chmod +x "$fl"
fi

if [ -n "${SETTINGS+set}" ]; then
  SETTINGS="$SETTINGS" timeout "${TESTS_SECONDS:-240}" "$here/bench/gpu_tests.sh" "$work/tests" >/dev/null 2>&1
  step "GPU tests rc=$?"
  cp "$work/tests/summary.txt" "$out/tests_summary.txt" 2>/dev/null && cat "$out/tests_summary.txt"
fi

if [ -n "${TIMINGS:-}" ]; then
  bins=$(mktemp -d)
  tar -C "$bins" -xJf "$here/bench/peers/gpu-tests.tar.xz"
  for t in $TIMINGS; do
    timeout "${TIMING_SECONDS:-200}" "$bins/backend_cuda" --ignored "$t" --nocapture --test-threads 1 \
      >>"$out/timings.txt" 2>&1
    step "timings $t rc=$?"
  done
fi

if [ -n "${AB:-}" ] && [ -x "$fl" ]; then
  for shape in ${AB_SHAPES:-qwen3-next-a3b-slice}; do
    SETTINGS="$AB" ROUNDS="${AB_ROUNDS:-2}" STREAMS="${AB_STREAMS:-1,8,64}" timeout "${AB_SECONDS:-200}" \
      "$here/bench/gpu_ab.sh" "$work/ab-$shape" "$shape" "$fl" >/dev/null 2>&1
    step "A/B $shape rc=$?"
    { echo "== $shape"; cat "$work/ab-$shape/ab.txt" 2>/dev/null; } | tee -a "$out/ab.txt"
  done
fi

if [ -n "${PROFILE_SHAPES:-}" ] && [ -x "$fl" ]; then
  for shape in $PROFILE_SHAPES; do
    # Its own settings (SETTINGS is the tests'), and a limit for the whole shape.
    SETTINGS="${PROFILE_SETTINGS:-built:FLASHLANE_AB=1}" RUN_TIMEOUT="${PROFILE_SECONDS:-150}" \
      timeout "${PROFILE_SHAPE_SECONDS:-240}" "$here/bench/gpu_profile.sh" "$work/profile" "$shape" "$fl" \
      "${PROFILE_STREAMS:-1,64}" >>"$out/profile.txt" 2>&1
    step "profile $shape rc=$?"
  done
fi

tar -C "$work" -cJf "$out/raw.tar.xz" --exclude=flashlane . 2>/dev/null
step "done"
