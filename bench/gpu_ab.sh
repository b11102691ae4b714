#!/usr/bin/env bash
# A/B of flashlane builds on the GPU, interleaved, on dummy weights of a real shape
# (bench/shapes/SHAPE): each round runs `flashlane bench --device cuda` once per binary, in
# order, so that drift of the machine falls on every binary alike.
#
#   ROUNDS=2 STREAMS=1,8 bench/gpu_ab.sh OUT_DIR SHAPE BINARY...
#
# Prints decode (and prefill) tokens/s per binary and round; raw JSON in OUT_DIR.
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
    json="$out/$shape.bin$i.round$round.json"
    timeout 300 "$bin" bench --device cuda --model "$dir" --load-format dummy \
      --streams "${STREAMS:-1,8}" --prompt-tokens 128 --new-tokens 128 --json >"$json" 2>/dev/null
    python3 - "$json" "$bin" "$round" <<'PY'
import json, sys
rows = json.load(open(sys.argv[1]))["rows"]
print(f"{sys.argv[2]} round {sys.argv[3]}: " + "  ".join(
    f"{r['streams']}: {r['decode_tokens_per_s']:.0f} dec / {r['prefill_tokens_per_s']:.0f} pre" for r in rows))
PY
  done
done
rm -rf "$dir"
