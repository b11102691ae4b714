#!/usr/bin/env bash
# Real model shapes on the GPU with dummy weights (bench/shapes/*/config.json, seeded bf16 weights
# made at load): `flashlane bench --device cuda` at 1, 8 and 64 streams per shape, and for the
# shapes in SERVE_SHAPES one chat request through `flashlane serve --device cuda`.
#
#   FLASHLANE=path/to/flashlane bench/gpu_shapes.sh OUT_DIR [SHAPE ...]
#       (default shapes: qwen3-4b qwen3-8b qwen3-32b; STREAMS=1,8,64; SERVE_SHAPES=qwen3-8b;
#        SERVE_ARGS="--parallel 8 --context 4096"; CONCURRENT=8 chat requests at once after the
#        first; STREAMS= skips the bench)
#
# Writes OUT_DIR/SHAPE.bench.json (+ .log), SHAPE.serve.log, SHAPE.chat.json (the first reply,
# then one line per concurrent reply) and SHAPE.slots.json (/slots while they ran).
set -uo pipefail
out=${1:?usage: bench/gpu_shapes.sh OUT_DIR [SHAPE ...]}
shift
shapes=("$@")
[ ${#shapes[@]} -gt 0 ] || shapes=(qwen3-4b qwen3-8b qwen3-32b)
bin=${FLASHLANE:-target/release/flashlane}
streams=${STREAMS-1,8,64}
serve_args=${SERVE_ARGS:---parallel 8 --context 4096}
concurrent=${CONCURRENT:-8}
serve_shapes=" ${SERVE_SHAPES-qwen3-8b} "
here=$(cd "$(dirname "$0")/.." && pwd)
mkdir -p "$out"
for s in "${shapes[@]}"; do
  # The shape's config with the default model's tokenizer (serve needs one; bench does not).
  dir=$(mktemp -d)
  cp "$here/bench/shapes/$s/config.json" "$here/models/flashlane-tiny/tokenizer.json" \
     "$here/models/flashlane-tiny/tokenizer_config.json" "$dir/"
  if [ -n "$streams" ]; then
    echo "== $s: bench --streams $streams"
    start=$(date +%s)
    timeout 400 "$bin" bench --device cuda --model "$dir" --load-format dummy --streams "$streams" \
      --prompt-tokens 128 --new-tokens 128 --json >"$out/$s.bench.json" 2>"$out/$s.bench.log"
    echo "rc $? in $(( $(date +%s) - start )) s"; tail -c 1500 "$out/$s.bench.json"; echo
  fi
  if [[ "$serve_shapes" == *" $s "* ]]; then
    echo "== $s: serve"
    start=$(date +%s)
    # shellcheck disable=SC2086 # SERVE_ARGS is a list of flags
    "$bin" serve --device cuda --model "$dir" --load-format dummy --port 0 --served-model-name m \
      $serve_args >/dev/null 2>"$out/$s.serve.log" &
    pid=$!
    url=""
    for _ in $(seq 300); do
      url=$(grep -o 'listening on http://[^ ]*' "$out/$s.serve.log" | head -1 | cut -d' ' -f3)
      [ -n "$url" ] && break
      kill -0 $pid 2>/dev/null || break
      sleep 1
    done
    if [ -n "$url" ]; then
      echo "listening after $(( $(date +%s) - start )) s"
      python3 - "$url" "$concurrent" "$out/$s.slots.json" >"$out/$s.chat.json" <<'PY'
import json, sys, threading, urllib.request
url, n, slots_path = sys.argv[1], int(sys.argv[2]), sys.argv[3]
def chat(i, results):
    body = {"model": "m", "messages": [{"role": "user", "content": f"Hello {i}"}],
            "max_tokens": 64}
    req = urllib.request.Request(url + "/v1/chat/completions", json.dumps(body).encode(),
                                 {"Content-Type": "application/json"})
    try:
        results[i] = json.loads(urllib.request.urlopen(req, timeout=300).read())
    except Exception as e:  # noqa: BLE001 - reported, not raised
        results[i] = {"error": repr(e)}
first = {}
chat(0, first)
print(json.dumps(first[0]))
results = {}
threads = [threading.Thread(target=chat, args=(i, results)) for i in range(n)]
for t in threads:
    t.start()
with open(slots_path, "w") as f:
    f.write(urllib.request.urlopen(url + "/slots", timeout=60).read().decode())
for t in threads:
    t.join()
ok = sum("choices" in r for r in results.values())
for i in range(n):
    r = results[i]
    print(json.dumps({"i": i, "ok": "choices" in r, "usage": r.get("usage"), "error": r.get("error")}))
print(f"{ok} of {n} concurrent requests answered", file=sys.stderr)
PY
      echo "chat rc $?: $(head -c 600 "$out/$s.chat.json")"
    fi
    kill -INT $pid 2>/dev/null; wait $pid
    head -40 "$out/$s.serve.log"
  fi
  rm -rf "$dir"
done
