#!/usr/bin/env bash
# Speculative decoding's wall-clock speed-up on the embedded default model (or MODEL): decode
# tokens/s with MTP and n-gram drafts over the same run without drafts, on the counting and code
# tasks, at 1 and 8 streams, all greedy (the replies are the same tokens with or without drafts:
# crates/backend-cpu/tests/mtp_drafts.rs proves it).
#
#   bench/mtp_speedup.sh [OUT_DIR]
#
# Environment: MODEL (default: the embedded flashlane-tiny), STREAMS (1,8), NEW_TOKENS (256),
# TASKS ("counting code"), DRAFTS ("none mtp:1 mtp:2 mtp:3 ngram:2 ngram:4"; MODE:K or
# MODE:K:COST, COST being `--draft-cost`, e.g. mtp:3:0 for always 3 drafts), REPS (1: passes over
# every setting, interleaved, so machine noise hits all alike; the table shows medians), BENCH_ARGS (extra
# `flashlane bench` arguments, e.g. "--device cuda"), FLASHLANE (the binary), RAYON_NUM_THREADS,
# COMMIT (what to record as the commit where the tree has no usable git history, e.g. a copy).
# Prints a markdown table (speed-up = decode tok/s with drafts / without, same task and streams)
# and leaves every run's JSON in OUT_DIR.
set -euo pipefail
cd "$(dirname "$0")/.."
OUT=${1:-/tmp/flashlane-mtp-$(date -u +%Y%m%dT%H%M%SZ)}
FLASHLANE=${FLASHLANE:-target/release/flashlane}
STREAMS=${STREAMS:-1,8}
NEW_TOKENS=${NEW_TOKENS:-256}
TASKS=${TASKS:-counting code}
DRAFTS=${DRAFTS:-none mtp:1 mtp:2 mtp:3 ngram:2 ngram:4}
BENCH_ARGS=${BENCH_ARGS:-}
REPS=${REPS:-1}
MODEL_ARGS=()
[ -n "${MODEL:-}" ] && MODEL_ARGS=(--model "$MODEL")
[ -x "$FLASHLANE" ] || { echo "build first: cargo build --release -p flashlane" >&2; exit 1; }
mkdir -p "$OUT"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%M:%SZ)"
  echo "commit: ${COMMIT:-$(git rev-parse --short HEAD 2>/dev/null || echo unknown)}"
  echo "cpu: $(lscpu | sed -n 's/^Model name: *//p') ($(nproc) cores)"
  command -v nvidia-smi >/dev/null && echo "gpu: $(nvidia-smi -L | head -1)"
  echo "load before: $(cut -d' ' -f1-3 /proc/loadavg)"
  echo "bench args: --streams $STREAMS --new-tokens $NEW_TOKENS $BENCH_ARGS"
} | tee "$OUT/machine.txt"

for rep in $(seq 1 "$REPS"); do
  for task in $TASKS; do
    for d in $DRAFTS; do
      IFS=: read -r mode k cost <<<"$d"
      [ "$mode" = none ] && k=0
      cost_args=()
      [ -n "${cost:-}" ] && cost_args=(--draft-cost "$cost")
      name="${task}_${mode}_${k:-0}${cost:+_cost$cost}.rep$rep"
      echo "== $name (pressure: $(sed -n 's/^some avg10=\([0-9.]*\).*/\1/p' /proc/pressure/cpu 2>/dev/null) %)" >&2
      # shellcheck disable=SC2086
      "$FLASHLANE" bench ${MODEL_ARGS[@]+"${MODEL_ARGS[@]}"} --task "$task" --streams "$STREAMS" \
        --new-tokens "$NEW_TOKENS" --draft "$mode" --draft-tokens "${k:-1}" ${cost_args[@]+"${cost_args[@]}"} \
        $BENCH_ARGS --json > "$OUT/$name.json"
    done
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"

python3 - "$OUT" <<'PY'
import json, pathlib, statistics, sys
out = pathlib.Path(sys.argv[1])
runs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
def key(r):
    k = 0 if r["draft"] == "none" else r["draft_tokens"]
    return (r["task"], r["draft"], k, r.get("draft_cost_percent") if k else None)
groups = {}
for r in runs:
    for row in r["rows"]:
        groups.setdefault(key(r) + (row["streams"],), []).append(row)
med = {g: statistics.median(row["decode_tokens_per_s"] for row in rows) for g, rows in groups.items()}
print("| task | streams | drafts | K | cost % | decode tok/s (median) | speed-up | acceptance | tokens/round | runs |")
print("|---|---|---|---|---|---|---|---|---|---|")
order = {"none": 0, "mtp": 1, "ngram": 2}
for g in sorted(groups, key=lambda g: (g[0], g[4], order[g[1]], g[2], g[3] or 0)):
    task, draft, k, cost, streams = g
    rows = groups[g]
    speedup = med[g] / med[(task, "none", 0, None, streams)]
    proposed = sum(row["draft_proposed"] for row in rows)
    acc = "–" if proposed == 0 else f"{100 * sum(row['draft_accepted'] for row in rows) / proposed:.1f} %"
    per_round = statistics.median((row["decode_tokens"] + streams) / row["rounds"] / streams for row in rows)
    print(f"| {task} | {streams} | {draft} | {k or '–'} | {'–' if cost is None else cost} | {med[g]:.1f} "
          f"| {speedup:.2f}× | {acc} | {per_round:.2f} | {len(rows)} |")
PY
