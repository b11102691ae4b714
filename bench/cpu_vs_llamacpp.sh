#!/usr/bin/env bash
# flashlane vs llama.cpp on the CPU, side by side in one run, on the same weights
# (bench/make_model.py makes both: the HF folder and its GGUF bf16 twin).
#
#   bench/cpu_vs_llamacpp.sh [MODEL_DIR] [LLAMA_CPP_BUILD_BIN] [OUT_DIR]
#
# Shapes (as in ../shared/BENCHMARKING.md's 2-core figures):
#   1 stream:  llama-bench -t 2 -p 128 -n 64          vs  flashlane bench --streams 1 --prompt-tokens 128 --new-tokens 64
#   N streams: llama-batched-bench -t 2 -npp 32 -ntg 64 -npl 1,4,8
#                                                      vs  flashlane bench --streams 1,4,8 --prompt-tokens 32 --new-tokens 64
# Run it on an otherwise idle machine (it prints the load first); the peers run back to back.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-/work/peers/qwen3-0.6b-random}
LLAMA=${2:-/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin}
OUT=${3:-/tmp/flashlane-bench-$(date -u +%Y%m%dT%H%M%SZ)}
GGUF=$MODEL/model-bf16.gguf
THREADS=${THREADS:-2}
FLASHLANE=${FLASHLANE:-target/release/flashlane}
mkdir -p "$OUT"
[ -x "$FLASHLANE" ] || { echo "build first: cargo build --release -p flashlane" >&2; exit 1; }
[ -f "$GGUF" ] || { echo "no $GGUF: run bench/make_model.py --llama-cpp ..." >&2; exit 1; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes)')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"
  echo "cores: $(nproc)  threads used: $THREADS"
  echo "simd flags: $(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_bf16|avx512vnni|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

export RAYON_NUM_THREADS=$THREADS
echo "== flashlane, 1 stream (prompt 128, 64 new)" | tee "$OUT/flashlane_1.txt"
"$FLASHLANE" bench --model "$MODEL" --streams 1 --prompt-tokens 128 --new-tokens 64 | tee -a "$OUT/flashlane_1.txt"
"$FLASHLANE" bench --model "$MODEL" --streams 1 --prompt-tokens 128 --new-tokens 64 --json > "$OUT/flashlane_1.json"

echo "== llama-bench, 1 stream" | tee "$OUT/llama_bench.txt"
"$LLAMA/llama-bench" -m "$GGUF" -t "$THREADS" -p 128 -n 64 -r 3 2>/dev/null | tee -a "$OUT/llama_bench.txt"

echo "== flashlane, 1/4/8 streams (prompt 32, 64 new)" | tee "$OUT/flashlane_n.txt"
"$FLASHLANE" bench --model "$MODEL" --streams 1,4,8 --prompt-tokens 32 --new-tokens 64 --json > "$OUT/flashlane_n.json"
python3 -c 'import json,sys; [print(r) for r in json.load(open(sys.argv[1]))["rows"]]' "$OUT/flashlane_n.json" | tee -a "$OUT/flashlane_n.txt"

echo "== llama-batched-bench, 1/4/8 streams" | tee "$OUT/llama_batched.txt"
"$LLAMA/llama-batched-bench" -m "$GGUF" -t "$THREADS" -c 2048 -npp 32 -ntg 64 -npl 1,4,8 2>&1 \
  | grep -E '^\|' | tee -a "$OUT/llama_batched.txt"

echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"

# Side by side: decode tokens/s, aggregate over the streams.
python3 - "$OUT" <<'PY'
import json, re, sys
out = sys.argv[1]
fl1 = json.load(open(f"{out}/flashlane_1.json"))["rows"][0]
fln = {r["streams"]: r for r in json.load(open(f"{out}/flashlane_n.json"))["rows"]}
tg = pp = None
for line in open(f"{out}/llama_bench.txt"):
    cells = [c.strip() for c in line.split("|")]
    if len(cells) > 3 and cells[-3].startswith("tg"):
        tg = float(cells[-2].split()[0])
    if len(cells) > 3 and cells[-3].startswith("pp"):
        pp = float(cells[-2].split()[0])
batched = {}
for line in open(f"{out}/llama_batched.txt"):
    cells = [c.strip() for c in line.strip().strip("|").split("|")]
    if len(cells) >= 10 and cells[2].isdigit():
        # PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s
        batched[int(cells[2])] = (float(cells[5]), float(cells[7]))
rows = []
rows.append(("1 stream, p128 n64 (llama-bench)", fl1["decode_tokens_per_s"], tg, fl1["prefill_tokens_per_s"], pp))
for n in sorted(fln):
    lp = batched.get(n, (None, None))
    rows.append((f"{n} streams, p32 n64 (batched-bench)", fln[n]["decode_tokens_per_s"], lp[1], fln[n]["prefill_tokens_per_s"], lp[0]))
fmt = lambda v: "–" if v is None else f"{v:.1f}"
ratio = lambda a, b: "–" if not b else f"{a / b:.2f}×"
lines = ["| shape | flashlane decode tok/s | llama.cpp decode tok/s | ratio | flashlane prefill tok/s | llama.cpp prefill tok/s |",
         "|---|---|---|---|---|---|"]
for name, f, l, fp, lp in rows:
    lines.append(f"| {name} | {fmt(f)} | {fmt(l)} | {ratio(f, l)} | {fmt(fp)} | {fmt(lp)} |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "raw outputs in $OUT"
