#!/usr/bin/env bash
# Speculative decoding's wall-clock speed-up on the embedded default model (or MODEL): decode
# tokens/s with MTP and n-gram drafts over the same run without drafts, on the counting and code
# tasks, at 1 and 8 streams, all greedy (the replies are the same tokens with or without drafts:
# crates/backend-cpu/tests/mtp_drafts.rs proves it).
#
#   bench/mtp_speedup.sh [OUT_DIR]
#
# Environment: MODEL (default: the embedded flashlane-tiny), STREAMS (1,8), NEW_TOKENS (256),
# TASKS ("counting code"), DRAFTS ("none mtp:1 mtp:2 mtp:3 ngram:2 ngram:4"), BENCH_ARGS (extra
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

for task in $TASKS; do
  for d in $DRAFTS; do
    mode=${d%%:*}
    k=${d#*:}
    [ "$mode" = none ] && k=0
    name="${task}_${mode}_${k}"
    echo "== $name" >&2
    # shellcheck disable=SC2086
    "$FLASHLANE" bench "${MODEL_ARGS[@]}" --task "$task" --streams "$STREAMS" \
      --new-tokens "$NEW_TOKENS" --draft "$mode" --draft-tokens "${k/#0/1}" $BENCH_ARGS --json \
      > "$OUT/$name.json"
  done
done
echo "load after: $(cut -d' ' -f1-3 /proc/loadavg)" | tee -a "$OUT/machine.txt"

python3 - "$OUT" <<'PY'
import json, pathlib, sys
out = pathlib.Path(sys.argv[1])
runs = [json.loads(p.read_text()) for p in sorted(out.glob("*.json"))]
base = {(r["task"], row["streams"]): row["decode_tokens_per_s"]
        for r in runs if r["draft"] == "none" for row in r["rows"]}
print("| task | streams | drafts | K | decode tok/s | speed-up | acceptance | tokens/round |")
print("|---|---|---|---|---|---|---|---|")
order = {"none": 0, "mtp": 1, "ngram": 2}
for r in sorted(runs, key=lambda r: (r["task"], order[r["draft"]], r["draft_tokens"])):
    for row in r["rows"]:
        tps = row["decode_tokens_per_s"]
        speedup = tps / base[(r["task"], row["streams"])]
        acc = row["acceptance"]
        acc = "–" if acc is None else f"{100 * acc:.1f} %"
        per_round = (row["decode_tokens"] + row["streams"]) / row["rounds"] / row["streams"]
        print(f"| {r['task']} | {row['streams']} | {r['draft']} | {r['draft_tokens'] or '–'} "
              f"| {tps:.1f} | {speedup:.2f}× | {acc} | {per_round:.2f} |")
PY
