#!/usr/bin/env bash
# A/B of flashlane builds, or of one build under settings that keep the bits (FLASHLANE_PDL,
# FLASHLANE_MATMUL_TILED, FLASHLANE_MATMUL_FIT, …), on the GPU, interleaved, on dummy weights of a
# real shape (bench/shapes/SHAPE): each round runs `flashlane bench --device cuda` once per binary
# and setting, in order, so that drift of the machine falls on every variant alike.
#
#   ROUNDS=2 STREAMS=1,8 bench/gpu_ab.sh OUT_DIR SHAPE BINARY...
#   SETTINGS="fit:FLASHLANE_MATMUL_FIT=1 nofit:FLASHLANE_MATMUL_FIT=0" bench/gpu_ab.sh OUT_DIR SHAPE BINARY
#   (a setting may set several variables, label:A=1,B=1; values hold no commas, spaces or globs)
#   PROMPT_TOKENS=4096 NEW_TOKENS=16 STREAMS=1 bench/gpu_ab.sh …   (a long prompt's prefill; 128 and 128 unless set)
#
# Prints decode (and prefill) tokens/s per variant and round (also to OUT_DIR/ab.txt); raw JSON
# and stderr in OUT_DIR.
set -uo pipefail
out=${1:?usage: bench/gpu_ab.sh OUT_DIR SHAPE BINARY...}
shape=${2:?usage: bench/gpu_ab.sh OUT_DIR SHAPE BINARY...}
shift 2
here=$(cd "$(dirname "$0")/.." && pwd)
dir=$(mktemp -d)
cp "$here/bench/shapes/$shape/config.json" "$dir/"
mkdir -p "$out"
for round in $(seq "${ROUNDS:-2}"); do
  i=0
  for bin in "$@"; do
    i=$((i + 1))
    # One setting, "as built", unless SETTINGS names some (label:VAR=VALUE).
    for setting in ${SETTINGS:-built:FLASHLANE_AB=1}; do
      label=bin$i.${setting%%:*}
      json="$out/$shape.$label.round$round.json"
      vars=${setting#*:}
      env ${vars//,/ } timeout 300 "$bin" bench --device cuda --model "$dir" --load-format dummy \
        --streams "${STREAMS:-1,8}" --prompt-tokens "${PROMPT_TOKENS:-128}" \
        --new-tokens "${NEW_TOKENS:-128}" --json \
        >"$json" 2>"$out/$shape.$label.round$round.err"
      python3 - "$json" "$label ($bin)" "$round" <<'PY' | tee -a "$out/ab.txt"
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
    print(f"{sys.argv[2]} round {sys.argv[3]}: " + "  ".join(
        f"{r['streams']}: {r['decode_tokens_per_s']:.0f} dec / {r['prefill_tokens_per_s']:.0f} pre"
        for r in rows))
except Exception as e:
    print(f"{sys.argv[2]} round {sys.argv[3]}: failed ({e})")
PY
    done
  done
done
rm -rf "$dir"
