#!/usr/bin/env bash
# The prompt cache on a shared-prefix workload (SGLang's "generated shared prefix" shape): N
# requests whose prompts start with the same ~2,100 tokens (720 words of the default model's
# tokenizer: 4 whole cache blocks of 512) and go on with ~128 tokens of their own, each asking 32
# tokens; time to first token and total time with the cache (default budget) and without
# (--prompt-cache-gb 0), one server at a time, at concurrency 8 and 1.
# Usage: bench/prompt_cache.sh OUT_DIR [FLASHLANE_BIN] [extra serve args...]
set -euo pipefail
out=${1:?usage: bench/prompt_cache.sh OUT_DIR [FLASHLANE_BIN] [serve args...]}
bin=${2:-target/release/flashlane}
shift $(( $# >= 2 ? 2 : 1 ))
mkdir -p "$out"
port=18093
for concurrency in 8 1; do
  requests=$(( concurrency == 1 ? 16 : 64 ))
  for mode in cache nocache; do
    extra=()
    [ "$mode" = nocache ] && extra=(--prompt-cache-gb 0)
    "$bin" serve --port $port --parallel 8 --context 4096 "$@" "${extra[@]}" 2>"$out/serve_${mode}_c$concurrency.log" &
    server=$!
    for _ in $(seq 1 600); do grep -q "listening on" "$out/serve_${mode}_c$concurrency.log" && break; sleep 0.2; done
    "$bin" loadgen --url http://127.0.0.1:$port --requests $requests --concurrency $concurrency \
      --shared-prefix-words 720 --prompt-words 42 --reply-tokens 32 --json > "$out/${mode}_c$concurrency.json"
    curl -s http://127.0.0.1:$port/metrics | grep -v '^#' | grep -E 'prompt_cache|prompt_tokens_total' \
      > "$out/${mode}_c${concurrency}_metrics.txt" || true
    kill $server; wait $server || true
  done
done
python3 - "$out" <<'PY'
import json, sys
out = sys.argv[1]
for c in (8, 1):
    row = {}
    for mode in ("cache", "nocache"):
        d = json.load(open(f"{out}/{mode}_c{c}.json"))
        row[mode] = (d["ttft_ms"]["p50"], d["ttft_ms"]["p90"], d["duration_s"])
    (a, a90, ad), (b, b90, bd) = row["cache"], row["nocache"]
    print(f"concurrency {c}: TTFT p50 {a:.0f} ms vs {b:.0f} ms ({b / a:.1f}x), p90 {a90:.0f} vs {b90:.0f}, total {ad:.1f} s vs {bd:.1f} s")
PY
