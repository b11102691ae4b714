#!/usr/bin/env bash
# The seed design's claim re-measured on one GPU: 16 sessions (65536,32768x3,16384x11 beside a
# 65536-token engine session) against three whole-window sessions (262144 tokens) for
# Qwen3-Next-80B-A3B FP8 (dummy weights of its shape), 48 concurrent streamed requests each.
# Usage on the GPU machine: OUT=DIR bash bench/seed_claim.sh (the flashlane binary from bench/peers/fl.tar.xz).
set -u
mkdir -p /tmp/b && tar xJf bench/peers/fl.tar.xz -C /tmp/b; B=/tmp/b/bin/flashlane
d=$(mktemp -d); cp bench/shapes/qwen3-next-80b-a3b-fp8/config.json models/flashlane-tiny/tokenizer.json models/flashlane-tiny/tokenizer_config.json $d/
run() { name=$1; shift
  $B serve --device cuda --model $d --load-format dummy --port 18097 --prompt-cache-gb 0 "$@" > $OUT/serve_$name.log 2>&1 & p=$!
  for i in $(seq 600); do grep -q "listening on" $OUT/serve_$name.log && break; sleep 0.2; done
  $B loadgen --url http://127.0.0.1:18097 --requests 48 --concurrency 48 --prompt-words 128 --reply-tokens 64 --json > $OUT/loadgen_$name.json 2>/dev/null
  curl -s localhost:18097/metrics | grep -E "^flashlane_(sessions|moves_total|admission_waits_total)" | grep -v " 0$" > $OUT/metrics_$name.txt
  kill $p; wait $p
  python3 -c "import json; d=json.load(open('$OUT/loadgen_$name.json')); print('$name', d['succeeded'], round(d['duration_s'],1), 'tok/s', round(d['output_token_throughput']), 'ttft', {k: round(v) for k,v in d['ttft_ms'].items()})"
}
run spec16 --context 65536 --slot-contexts 65536,32768x3,16384x11 --slot-grow 256
run whole3 --context 262144 --parallel 3
grep -h "sessions," $OUT/serve_*.log
