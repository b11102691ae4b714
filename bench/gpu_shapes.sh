#!/usr/bin/env bash
# Real model shapes on the GPU with dummy weights (bench/shapes/*/config.json, seeded bf16 weights
# made at load): `flashlane bench --device cuda` at 1, 8 and 64 streams per shape, and for the
# shapes in SERVE_SHAPES one chat request through `flashlane serve --device cuda`.
#
#   FLASHLANE=path/to/flashlane bench/gpu_shapes.sh OUT_DIR [SHAPE ...]
#       (default shapes: qwen3-4b qwen3-8b qwen3-32b; STREAMS=1,8,64; SERVE_SHAPES=qwen3-8b)
#
# Writes OUT_DIR/SHAPE.bench.json (+ .log), SHAPE.serve.log and SHAPE.chat.json.
set -uo pipefail
out=${1:?usage: bench/gpu_shapes.sh OUT_DIR [SHAPE ...]}
shift
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(qwen3-4b qwen3-8b qwen3-32b)
bin=${FLASHLANE:-target/release/flashlane}
streams=${STREAMS:-1,8,64}
serve_shapes=" ${SERVE_SHAPES-qwen3-8b} "
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
for s in "${shapes[@]}"; do
  # The shape's config with the default model's tokenizer (serve needs one; bench does not).
  dir=$(mktemp -d)
  cp "$here/bench/shapes/$s/config.json" "$here/models/flashlane-tiny/tokenizer.json" \
     "$here/models/flashlane-tiny/tokenizer_config.json" "$dir/"
  echo "== $s: bench --streams $streams"
  start=$(date +%s)
  timeout 400 "$bin" bench --device cuda --model "$dir" --load-format dummy --streams "$streams" \
    --prompt-tokens 128 --new-tokens 128 --json >"$out/$s.bench.json" 2>"$out/$s.bench.log"
  echo "rc $? in $(( $(date +%s) - start )) s"; tail -c 1500 "$out/$s.bench.json"; echo
  if [[ "$serve_shapes" == *" $s "* ]]; then
    echo "== $s: serve"
    "$bin" serve --device cuda --model "$dir" --load-format dummy --port 0 --served-model-name m \
      --parallel 8 --context 4096 >/dev/null 2>"$out/$s.serve.log" &
    pid=$!
    url=""
    for _ in $(seq 300); do
      url=$(grep -o 'listening on http://[^ ]*' "$out/$s.serve.log" | head -1 | cut -d' ' -f3)
      [ -n "$url" ] && break
      kill -0 $pid 2>/dev/null || break
      sleep 1
    done
    if [ -n "$url" ]; then
      python3 - "$url" >"$out/$s.chat.json" <<'PY'
import json, sys, urllib.request
body = {"model": "m", "messages": [{"role": "user", "content": "Hello"}], "max_tokens": 16}
req = urllib.request.Request(sys.argv[1] + "/v1/chat/completions", json.dumps(body).encode(),
                             {"Content-Type": "application/json"})
print(urllib.request.urlopen(req, timeout=120).read().decode())
PY
      echo "chat rc $?: $(head -c 600 "$out/$s.chat.json")"
    fi
    kill -INT $pid 2>/dev/null; wait $pid
    head -40 "$out/$s.serve.log"
  fi
  rm -rf "$dir"
done
