#!/usr/bin/env bash
# A/B of flashlane builds, or of one build under settings that keep the bits (FLASHLANE_PDL,
# FLASHLANE_MATMUL_TILED, FLASHLANE_MATMUL_FIT, …), on the GPU, interleaved, on dummy weights of a
# real shape (bench/shapes/SHAPE): each round runs `flashlane bench --device cuda` once per binary
# and setting, in order, so that drift of the machine falls on every variant alike.
#
#   ROUNDS=2 STREAMS=1,8 bench/gpu_ab.sh OUT_DIR SHAPE BINARY...
#   SETTINGS="fit:FLASHLANE_MATMUL_FIT=1 nofit:FLASHLANE_MATMUL_FIT=0" bench/gpu_ab.sh OUT_DIR SHAPE BINARY
#   (a setting may set several variables, label:A=1,B=1; values hold no commas, spaces or globs)
#   PROMPT_TOKENS=4096 NEW_TOKENS=16 STREAMS=1 bench/gpu_ab.sh …   (a long prompt's prefill; 128 and 128 unless set)
#   BENCH_ARGS="--prompt-tokens-min 128" … (more `flashlane bench` arguments, e.g. prompts of
#   spread lengths; words without spaces or globs)
#   RUN_TIMEOUT (seconds a bench run, 300 by default) bounds each run: bound a call by it rather
#   than by a `timeout` around this script, which would leave the run it kills the script in going.
#
# Prints decode (and prefill) tokens/s per variant and round (also to OUT_DIR/ab.txt), then each
# variant's means over the rounds with their ratios to the first variant (OUT_DIR/ab_means.txt);
# raw JSON and stderr in OUT_DIR.
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
    # One setting, "as built", unless SETTINGS names some (label:VAR=VALUE).
    for setting in ${SETTINGS:-built:FLASHLANE_AB=1}; do
      label=bin$i.${setting%%:*}
      json="$out/$shape.$label.round$round.json"
      vars=${setting#*:}
      env ${vars//,/ } timeout "${RUN_TIMEOUT:-300}" "$bin" bench --device cuda --model "$dir" --load-format dummy \
        --streams "${STREAMS:-1,8}" --prompt-tokens "${PROMPT_TOKENS:-128}" \
        --new-tokens "${NEW_TOKENS:-128}" ${BENCH_ARGS:-} --json \
        >"$json" 2>"$out/$shape.$label.round$round.err"
      python3 - "$json" "$label ($bin)" "$round" <<'PY' | tee -a "$out/ab.txt"
import json, sys
try:
    rows = json.load(open(sys.argv[1]))["rows"]
    print(f"{sys.argv[2]} round {sys.argv[3]}: " + "  ".join(
        f"{r['streams']}: {r['decode_tokens_per_s']:.0f} dec / {r['prefill_tokens_per_s']:.0f} pre"
        + (f" / {r['output_tokens_per_s']:.0f} out" if "output_tokens_per_s" in r else "")
        for r in rows))
except Exception as e:
    print(f"{sys.argv[2]} round {sys.argv[3]}: failed ({e})")
PY
    done
  done
done
rm -rf "$dir"
# Each variant's mean over the rounds, by stream count, and its ratio to the first variant's
# (the change a variant makes, the figure a decision reads; also to OUT_DIR/ab_means.txt).
python3 - "$out/ab.txt" <<'PY' | tee "$out/ab_means.txt"
import collections, re, sys
dec, pre, out = collections.defaultdict(list), collections.defaultdict(list), collections.defaultdict(list)
order = []
for line in open(sys.argv[1]):
    m = re.match(r"(\S+) \(.*\) round \d+: (.*)", line)
    if not m:
        continue
    label = m.group(1)
    if label not in order:
        order.append(label)
    # (" / O out": the output throughput of builds that report it.)
    for s, d, p, o in re.findall(r"(\d+): (\d+) dec / (\d+) pre(?: / (\d+) out)?", m.group(2)):
        dec[(label, int(s))].append(int(d))
        pre[(label, int(s))].append(int(p))
        if o:
            out[(label, int(s))].append(int(o))
mean = lambda v: sum(v) / len(v)
for label in order:
    cells = []
    for (l, s) in sorted(k for k in dec if k[0] == label):
        base = (order[0], s)
        d, p = mean(dec[(l, s)]), mean(pre[(l, s)])
        ratio = lambda x, b: f" ({x / mean(b):.3f}x)" if b and label != order[0] else ""
        cell = f"{s}: {d:.0f}{ratio(d, dec.get(base))} dec / {p:.0f}{ratio(p, pre.get(base))} pre"
        if out.get((l, s)):
            o = mean(out[(l, s)])
            cell += f" / {o:.0f}{ratio(o, out.get(base))} out"
        cells.append(cell)
    print(f"mean {label}: " + "  ".join(cells))
PY
