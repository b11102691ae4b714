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
# Environment: THREADS (2), REPS (llama-bench repetitions, 3), LLAMA_ARGS (extra llama.cpp
# arguments, e.g. "--poll 0" so its threads sleep instead of spinning on a busy machine), VARIANTS (flashlane matmul kernels
# to run, "auto" = run-time detected; "portable auto" also runs the portable kernel), FLASHLANE
# (the binary). Run it on an otherwise idle machine (it prints the load before and after); the
# peers run back to back.
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-/work/peers/qwen3-0.6b-random}
LLAMA=${2:-/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin}
OUT=${3:-/tmp/flashlane-bench-$(date -u +%Y%m%dT%H%M%SZ)}
GGUF=$MODEL/model-bf16.gguf
THREADS=${THREADS:-2}
REPS=${REPS:-3}
LLAMA_ARGS=${LLAMA_ARGS:-}
VARIANTS=${VARIANTS:-auto}
FLASHLANE=${FLASHLANE:-target/release/flashlane}
mkdir -p "$OUT"
[ -x "$FLASHLANE" ] || { echo "build first: cargo build --release -p flashlane" >&2; exit 1; }
[ -f "$GGUF" ] || { echo "no $GGUF: run bench/make_model.py --llama-cpp ..." >&2; exit 1; }

{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes in crates/)')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"
  echo "cores: $(nproc)  threads used: $THREADS"
  echo "simd flags: $(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_bf16|avx512vnni|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
} | tee "$OUT/machine.txt"

export RAYON_NUM_THREADS=$THREADS
flashlane() { # variant, output name, bench args...
  local variant=$1 name=$2; shift 2
  local env=()
  [ "$variant" = auto ] || env=(FLASHLANE_CPU_KERNELS="$variant")
  echo "== flashlane ($variant kernels) $*"
  env "${env[@]}" "$FLASHLANE" bench --model "$MODEL" "$@" --json > "$OUT/$name.json"
  cat "$OUT/$name.json"
}
for v in $VARIANTS; do
  flashlane "$v" "flashlane_${v}_1" --streams 1 --prompt-tokens 128 --new-tokens 64
done
echo "== llama-bench -t $THREADS -p 128 -n 64 -r $REPS $LLAMA_ARGS"
# shellcheck disable=SC2086
"$LLAMA/llama-bench" -m "$GGUF" -t "$THREADS" -p 128 -n 64 -r "$REPS" $LLAMA_ARGS 2>/dev/null | tee "$OUT/llama_bench.txt"
for v in $VARIANTS; do
  flashlane "$v" "flashlane_${v}_n" --streams 1,4,8 --prompt-tokens 32 --new-tokens 64
done
echo "== llama-batched-bench -t $THREADS -npp 32 -ntg 64 -npl 1,4,8 $LLAMA_ARGS"
# shellcheck disable=SC2086
"$LLAMA/llama-batched-bench" -m "$GGUF" -t "$THREADS" -c 2048 -npp 32 -ntg 64 -npl 1,4,8 $LLAMA_ARGS 2>&1 \
  | grep -E '^\|' | tee "$OUT/llama_batched.txt"
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"

# Side by side: decode tokens/s (aggregate over the streams) and prefill tokens/s.
python3 - "$OUT" "$VARIANTS" <<'PY'
import json, sys
out, variants = sys.argv[1], sys.argv[2].split()
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
fmt = lambda v: "–" if v is None else f"{v:.1f}"
ratio = lambda a, b: "–" if not b else f"{a / b:.2f}×"
lines = ["| shape | flashlane kernels | flashlane decode tok/s | llama.cpp decode tok/s | ratio | flashlane prefill tok/s | llama.cpp prefill tok/s |",
         "|---|---|---|---|---|---|---|"]
for v in variants:
    r = json.load(open(f"{out}/flashlane_{v}_1.json"))["rows"][0]
    lines.append(f"| 1 stream, prompt 128, 64 new (vs llama-bench) | {v} | {fmt(r['decode_tokens_per_s'])} | {fmt(tg)} | {ratio(r['decode_tokens_per_s'], tg)} | {fmt(r['prefill_tokens_per_s'])} | {fmt(pp)} |")
for v in variants:
    for r in json.load(open(f"{out}/flashlane_{v}_n.json"))["rows"]:
        n = r["streams"]
        lp, lt = batched.get(n, (None, None))
        lines.append(f"| {n} stream{'s' if n > 1 else ''}, prompt 32, 64 new (vs llama-batched-bench) | {v} | {fmt(r['decode_tokens_per_s'])} | {fmt(lt)} | {ratio(r['decode_tokens_per_s'], lt)} | {fmt(r['prefill_tokens_per_s'])} | {fmt(lp)} |")
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "raw outputs in $OUT"
