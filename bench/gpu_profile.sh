#!/usr/bin/env bash
# Where a decode step goes on the GPU, per kernel: ncu over `flashlane bench` on dummy weights of
# a shape (bench/shapes/SHAPE), graphs off so that every kernel is its own launch, then
# bench/ncu_steps.py. One run per stream count and setting (label:VAR=VALUE[,VAR=VALUE], as in
# bench/gpu_ab.sh; the bits never change, so every setting runs the same steps).
#
#   bench/gpu_profile.sh OUT_DIR SHAPE BINARY [STREAMS]          (STREAMS: 1,64 by default)
#   SETTINGS="base:FLASHLANE_AB=1 nofit:FLASHLANE_MOE_FIT=0" bench/gpu_profile.sh OUT qwen3-next-a3b-slice BIN 1
#
# Writes OUT_DIR/SHAPE.LABEL.sSTREAMS.csv (ncu's CSV) and .txt (the step summary, also printed).
# A stream count's prompt step is told apart from its decode steps by its length
# (bench/ncu_steps.py), so NEW_TOKENS (12 by default) leaves several decode steps after it.
# PROMPT_TOKENS (16 by default) sets each stream's prompt; STEPS=prompt summarises the longest
# step (the prompt's) instead of the decode steps: `STEPS=prompt PROMPT_TOKENS=128
# bench/gpu_profile.sh OUT SHAPE BIN 1` for where one 128-token prompt goes. HEALTH=1 also
# collects each kernel's DRAM throughput, achieved occupancy, shared-memory bank conflicts and
# spills (bench/ncu_steps.py's HEALTH_METRICS: several replays of each launch, so slower: on the
# H100 ~0.13 s a launch, a Qwen3-0.6B or -4B one-stream step of 230-290 launches ~30-40 s, so
# NEW_TOKENS defaults to 5 there: the steps after the first two are averaged). Bound a run by
# RUN_TIMEOUT (seconds a ncu run, 200 by default), not by a `timeout` around this script: that
# kills the script and leaves its ncu running beside the next one (session 48 lost a call so).
set -uo pipefail
out=${1:?usage: bench/gpu_profile.sh OUT_DIR SHAPE BINARY [STREAMS]}
shape=${2:?usage: bench/gpu_profile.sh OUT_DIR SHAPE BINARY [STREAMS]}
bin=${3:?usage: bench/gpu_profile.sh OUT_DIR SHAPE BINARY [STREAMS]}
streams=${4:-1,64}
here=$(cd "$(dirname "$0")/.." && pwd)
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
[ -x "$ncu" ] || { echo "gpu_profile: no ncu on this machine" >&2; exit 1; }
[ -f "$here/bench/shapes/$shape/config.json" ] || { echo "gpu_profile: no bench/shapes/$shape/config.json" >&2; exit 1; }
dir=$(mktemp -d)
cp "$here/bench/shapes/$shape/config.json" "$dir/"
mkdir -p "$out"
status=0
metrics=gpu__time_duration.sum
default_new_tokens=12
if [ "${HEALTH:-0}" = 1 ]; then
  default_new_tokens=5
  # Only the metrics this ncu knows (an unknown one fails the whole run); the others are left
  # out with a word, and their columns read nan. Where the query gives nothing, all are asked.
  known=$("$ncu" --query-metrics 2>/dev/null | awk '{print $1}')
  for m in $(python3 -c "import sys; sys.path.insert(0, '$here/bench'); import ncu_steps; print(' '.join(m for m, _ in ncu_steps.HEALTH_METRICS))"); do
    if [ -z "$known" ] || grep -qx "${m%.*}" <<<"$known"; then
      metrics+=",$m"
    else
      echo "gpu_profile: this ncu has no $m: left out" >&2
    fi
  done
fi
for n in ${streams//,/ }; do
  for setting in ${SETTINGS:-built:FLASHLANE_AB=1}; do
    label=${setting%%:*}
    vars=${setting#*:}
    base="$out/$shape.$label.s$n"
    env ${vars//,/ } FLASHLANE_CUDA_GRAPHS=0 timeout "${RUN_TIMEOUT:-200}" "$ncu" --clock-control none \
      --cache-control none --metrics "$metrics" --csv "$bin" bench --device cuda --model "$dir" \
      --load-format dummy --streams "$n" --prompt-tokens "${PROMPT_TOKENS:-16}" --new-tokens "${NEW_TOKENS:-$default_new_tokens}" \
      >"$base.csv" 2>"$base.err" || { echo "gpu_profile: $label at $n streams failed (see $base.err)" >&2; status=1; }
    python3 "$here/bench/ncu_steps.py" $([ "${STEPS:-decode}" = prompt ] && echo --prompt) "$base.csv" | tee "$base.txt"
  done
done
exit $status
