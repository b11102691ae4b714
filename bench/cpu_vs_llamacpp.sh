#!/usr/bin/env bash
# flashlane vs llama.cpp on the CPU, side by side, on the same weights (bench/make_model.py makes
# both: the HF folder and its GGUF bf16 twin), in ROUNDS interleaved rounds; the table gives each
# figure's median over the rounds and the median of the per-round ratios.
#
#   bench/cpu_vs_llamacpp.sh [MODEL_DIR] [LLAMA_CPP_BUILD_BIN] [OUT_DIR]
#
# Shapes: the same depths on both sides (flashlane's decode rate counts the tokens after each
# stream's first, which its prefill yields: 63 decode steps at positions 1-63 or 128-190).
#   1 stream at depth 0:   llama-bench -t 2 -p 128 -n 64 (its tg64 decodes positions 0-63)
#                          vs flashlane bench --streams 1 --prompt-tokens 1 --new-tokens 64
#   1 stream at depth 128: llama-bench -t 2 -p 128 -n 64 -d 128 (tg64 @ d128: positions 128-191)
#                          vs flashlane bench --streams 1 --prompt-tokens 128 --new-tokens 64
#   N streams:             llama-batched-bench -t 2 -npp 32 -ntg 64 -npl 1,4,8
#                          vs flashlane bench --streams 1,4,8 --prompt-tokens 32 --new-tokens 64
# Prefill is compared on 128-token prompts (pp128 vs flashlane's 128-token prompt), on the
# N-stream rows, and on one long prompt of each LONG_PROMPTS length:
#   llama-bench -t 2 -p 512,2048 -n 0 vs flashlane bench --streams 1 --prompt-tokens 512 (2048)
# (where attention over the prompt weighs as much as the matmuls).
# Environment: GGUF (llama.cpp's model file; default MODEL/model-bf16.gguf: an FP8 twin made by
# bench/quantise_fp8.py is compared with llama.cpp's Q8_0 of the bf16 GGUF, its nearest format,
# made by `llama-quantize MODEL/model-bf16.gguf OUT.gguf Q8_0`), THREADS (2), ROUNDS (3), REPS (llama-bench repetitions per round, 2),
# LONG_PROMPTS ("512 2048"; empty skips those rows), LLAMA_BENCH_ARGS and LLAMA_BATCHED_ARGS
# (extra arguments of llama-bench and llama-batched-bench alone, whose flags differ: a Q8_0
# GGUF on a Xeon whose AMX repacking faults in llama.cpp runs with "--repack 0" and
# "--no-repack", bench/RESULTS.md session 43), LLAMA_ARGS
# (extra llama.cpp arguments, e.g. "--poll 0"), FLASHLANE_ARGS (extra flashlane bench
# arguments, e.g. "--mmap", or "--matmul-input bf16" for llama.cpp's own arithmetic: its bf16
# matmuls round the activations to bf16 too), FLASHLANE (the binary). Run it on an otherwise
# idle machine (it prints the load and CPU pressure before and after). Where a C compiler is
# found, bench/membw.c measures the machine's plain memory read rate (THREADS threads, 1 GiB)
# before and after each round, into machine.txt and under the table: a memory-bound decode moves
# with it, and on a shared VM it moves between levels (bench/RESULTS.md, session 41).
set -euo pipefail
cd "$(dirname "$0")/.."
MODEL=${1:-/work/peers/qwen3-0.6b-random}
LLAMA=${2:-/work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp/build/bin}
OUT=${3:-/tmp/flashlane-bench-$(date -u +%Y%m%dT%H%M%SZ)}
GGUF=${GGUF:-$MODEL/model-bf16.gguf}
THREADS=${THREADS:-2}
ROUNDS=${ROUNDS:-3}
LONG_PROMPTS=${LONG_PROMPTS-512 2048}
REPS=${REPS:-2}
LLAMA_ARGS=${LLAMA_ARGS:-}
LLAMA_BENCH_ARGS="$LLAMA_ARGS ${LLAMA_BENCH_ARGS:-}"
LLAMA_BATCHED_ARGS="$LLAMA_ARGS ${LLAMA_BATCHED_ARGS:-}"
FLASHLANE_ARGS=${FLASHLANE_ARGS:-}
FLASHLANE=${FLASHLANE:-target/release/flashlane}
mkdir -p "$OUT"
[ -x "$FLASHLANE" ] || { echo "build first: cargo build --release -p flashlane" >&2; exit 1; }
[ -f "$GGUF" ] || { echo "no $GGUF: run bench/make_model.py --llama-cpp ..." >&2; exit 1; }

pressure() { sed -n 's/^some avg10=\([0-9.]*\).*/\1 %/p' /proc/pressure/cpu 2>/dev/null || echo "n/a"; }
# The plain memory read rate, GB/s ("n/a" without a C compiler). Its binary stays out of OUT,
# whose files are kept beside the results.
MEMBW=""
membw_dir=$(mktemp -d)
trap 'rm -rf "$membw_dir"' EXIT
if command -v cc >/dev/null && cc -O2 -pthread bench/membw.c -o "$membw_dir/membw" 2>/dev/null; then
  MEMBW="$membw_dir/membw"
fi
membw() { if [ -n "$MEMBW" ]; then "$MEMBW" 1 "$THREADS"; else echo "n/a"; fi; }
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: $(git rev-parse --short HEAD)$(git diff --quiet HEAD -- crates || echo ' (+ uncommitted changes in crates/)')"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p')"
  echo "cores: $(nproc)  threads used: $THREADS  rounds: $ROUNDS  llama-bench reps: $REPS"
  echo "simd flags: $(grep -o -w -E 'avx2|fma|avx512f|avx512bw|avx512_bf16|avx512vnni|amx_tile|amx_bf16' /proc/cpuinfo | sort -u | tr '\n' ' ')"
  echo "flashlane args: ${FLASHLANE_ARGS:-none}  llama-bench args:${LLAMA_BENCH_ARGS}  llama-batched-bench args:${LLAMA_BATCHED_ARGS}"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)  cpu pressure before: $(pressure)"
} | tee "$OUT/machine.txt"

export RAYON_NUM_THREADS=$THREADS
flashlane() { # output name, bench args...
  local name=$1; shift
  echo "== flashlane bench $* $FLASHLANE_ARGS"
  # shellcheck disable=SC2086
  "$FLASHLANE" bench --model "$MODEL" "$@" $FLASHLANE_ARGS --json > "$OUT/$name.json"
  cat "$OUT/$name.json"
}
for round in $(seq 1 "$ROUNDS"); do
  bw=$(membw)
  echo "round $round memory read before: $bw GB/s" >>"$OUT/machine.txt"
  echo "=== round $round of $ROUNDS (cpu pressure $(pressure), memory read $bw GB/s)"
  flashlane "r${round}_flashlane_d0" --streams 1 --prompt-tokens 1 --new-tokens 64
  echo "== llama-bench -t $THREADS -p 128 -n 64 -d 0,128 -r $REPS $LLAMA_BENCH_ARGS"
  # shellcheck disable=SC2086
  "$LLAMA/llama-bench" -m "$GGUF" -t "$THREADS" -p 128 -n 64 -d 0,128 -r "$REPS" $LLAMA_BENCH_ARGS 2>/dev/null \
    | tee "$OUT/r${round}_llama_bench.txt"
  flashlane "r${round}_flashlane_d128" --streams 1 --prompt-tokens 128 --new-tokens 64
  flashlane "r${round}_flashlane_n" --streams 1,4,8 --prompt-tokens 32 --new-tokens 64
  echo "== llama-batched-bench -t $THREADS -npp 32 -ntg 64 -npl 1,4,8 $LLAMA_BATCHED_ARGS"
  # shellcheck disable=SC2086
  "$LLAMA/llama-batched-bench" -m "$GGUF" -t "$THREADS" -c 2048 -npp 32 -ntg 64 -npl 1,4,8 $LLAMA_BATCHED_ARGS 2>&1 \
    | grep -E '^\|' | tee "$OUT/r${round}_llama_batched.txt"
  if [ -n "$LONG_PROMPTS" ]; then
    for p in $LONG_PROMPTS; do
      flashlane "r${round}_flashlane_p$p" --streams 1 --prompt-tokens "$p" --new-tokens 1
    done
    echo "== llama-bench -t $THREADS -p ${LONG_PROMPTS// /,} -n 0 -r $REPS $LLAMA_BENCH_ARGS"
    # shellcheck disable=SC2086
    "$LLAMA/llama-bench" -m "$GGUF" -t "$THREADS" -p "${LONG_PROMPTS// /,}" -n 0 -r "$REPS" $LLAMA_BENCH_ARGS \
      2>/dev/null | tee "$OUT/r${round}_llama_prompts.txt"
  fi
  echo "round $round memory read after: $(membw) GB/s" | tee -a "$OUT/machine.txt"
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)  cpu pressure after: $(pressure)" | tee -a "$OUT/machine.txt"

# Side by side: medians over the rounds of decode tokens/s (aggregate over the streams), of
# prefill tokens/s, and of the per-round decode ratios.
python3 - "$OUT" "$ROUNDS" "$LONG_PROMPTS" <<'PY'
import json, statistics, sys
out, rounds, long_prompts = sys.argv[1], int(sys.argv[2]), [int(p) for p in sys.argv[3].split()]

def llama_bench(r, name="bench"):
    """{(test, depth): tokens/s} from a llama-bench table: 'tg64', 'tg64 @ d128', 'pp128', ..."""
    rows = {}
    for line in open(f"{out}/r{r}_llama_{name}.txt"):
        cells = [c.strip() for c in line.split("|")]
        if len(cells) > 3 and cells[-3][:2] in ("pp", "tg"):
            test, _, depth = cells[-3].partition(" @ d")
            rows[(test, int(depth or 0))] = float(cells[-2].split()[0])
    return rows

def batched(r):
    rows = {}
    for line in open(f"{out}/r{r}_llama_batched.txt"):
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) >= 10 and cells[2].isdigit():
            # PP | TG | B | N_KV | T_PP s | S_PP t/s | T_TG s | S_TG t/s | T s | S t/s
            rows[int(cells[2])] = (float(cells[5]), float(cells[7]))
    return rows

def flashlane(r, name):
    return {row["streams"]: row for row in json.load(open(f"{out}/r{r}_flashlane_{name}.json"))["rows"]}

shapes = []  # (label, [(flashlane decode, llama decode, flashlane prefill, llama prefill) per round])
per_round = {"d0": [], "d128": []}
for r in range(1, rounds + 1):
    lb = llama_bench(r)
    f0, f128 = flashlane(r, "d0")[1], flashlane(r, "d128")[1]
    per_round["d0"].append((f0["decode_tokens_per_s"], lb.get(("tg64", 0)), None, None))
    per_round["d128"].append((f128["decode_tokens_per_s"], lb.get(("tg64", 128)),
                              f128["prefill_tokens_per_s"], lb.get(("pp128", 0))))
shapes.append(("1 stream, depth 0, 64 new (vs llama-bench tg64)", per_round["d0"]))
shapes.append(("1 stream, depth 128, 64 new (vs llama-bench tg64 @ d128)", per_round["d128"]))
fn = {r: flashlane(r, "n") for r in range(1, rounds + 1)}
bb = {r: batched(r) for r in range(1, rounds + 1)}
for n in sorted(fn[1]):
    rows = []
    for r in range(1, rounds + 1):
        f, (lp, lt) = fn[r][n], bb[r].get(n, (None, None))
        rows.append((f["decode_tokens_per_s"], lt, f["prefill_tokens_per_s"], lp))
    shapes.append((f"{n} stream{'s' if n > 1 else ''}, prompt 32, 64 new (vs llama-batched-bench)", rows))

med = lambda vs: statistics.median(vs) if vs else None
fmt = lambda v: "–" if v is None else f"{v:.1f}"
lines = ["| shape | flashlane decode tok/s | llama.cpp decode tok/s | decode ratio (median; per round) | flashlane prefill tok/s | llama.cpp prefill tok/s |",
         "|---|---|---|---|---|---|"]
for label, rows in shapes:
    ratios = [f / l for f, l, _, _ in rows if l]
    col = lambda i: med([row[i] for row in rows if row[i] is not None])
    each = ", ".join(f"{x:.2f}" for x in ratios)
    ratio = "–" if not ratios else f"**{med(ratios):.2f}×** ({each})"
    lines.append(f"| {label} | {fmt(col(0))} | {fmt(col(1))} | {ratio} | {fmt(col(2))} | {fmt(col(3))} |")
if long_prompts:
    lines += ["", "| one prompt of | flashlane prefill tok/s | llama.cpp prefill tok/s (llama-bench) | ratio (median; per round) |",
              "|---|---|---|---|"]
    for p in long_prompts:
        pairs = [(flashlane(r, f"p{p}")[1]["prefill_tokens_per_s"], llama_bench(r, "prompts").get((f"pp{p}", 0)))
                 for r in range(1, rounds + 1)]
        ratios = [f / l for f, l in pairs if l]
        each = ", ".join(f"{x:.2f}" for x in ratios)
        ratio = "–" if not ratios else f"**{med(ratios):.2f}×** ({each})"
        lines.append(f"| {p} tokens | {fmt(med([f for f, _ in pairs]))} | {fmt(med([l for _, l in pairs if l]))} | {ratio} |")
reads = [l.strip() for l in open(f"{out}/machine.txt") if l.startswith("round ") and "memory read" in l]
if reads:
    lines += ["", "Plain memory read (bench/membw.c), GB/s: " + "; ".join(r.replace(" memory read", "").replace(" GB/s", "") for r in reads)]
open(f"{out}/table.md", "w").write("\n".join(lines) + "\n")
print("\n".join(lines))
PY
echo "raw outputs in $OUT"
