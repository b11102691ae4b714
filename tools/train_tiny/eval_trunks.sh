#!/usr/bin/env bash
# Evaluates the trunks a device stage brought back (tools/train_tiny/pack_trunks.sh) against the
# shipped default model on counting, the way sessions 51 and 52 chose what to ship: each trunk under
# the shipped model's MTP head and files (`average_models.py --weights 0,1`) and the mean of it and
# the shipped trunk (0.5 / 0.5), every candidate and the shipped model asked the held-out counting
# sets at T = 0 and 0.7 (`eval_skills.py --skills count`), then one table of the counts within 4
# digits that each got right.
#
#   tools/train_tiny/eval_trunks.sh OUT_DIR NAME=PARTS_DIR ...
#
# NAME=PARTS_DIR: the stage's name and the folder holding trunk_NAME.safetensors.xz.part-* (what
# the device call brought back), or a whole model directory (holding model.safetensors: asked as
# it is, with no mean; a stage of another shape than MODEL's, as session 66's tied s4z11); with META (a folder holding trunk_NAME.sha256, from the same
# call) the reassembled trunk's sha256 is checked. Environment: FLASHLANE (the binary,
# target/release/flashlane), MODEL (the shipped model, models/flashlane-tiny), PYTHON (python3:
# needs numpy, the `openai` client and jinja2), SETS ("default:120 20261203:240 20261204:240":
# seed:cases, `default` for eval_skills.py's own seed). Writes OUT_DIR/m_* (the candidates and
# a copy of the shipped model), OUT_DIR/flashlane (a copy of the binary),
# OUT_DIR/eval/SET_CANDIDATE.{json,txt} and OUT_DIR/table.md (also printed). ~2 min a candidate
# and set of 240 on a 2-core machine; the shipped model's rows let the table stand on its own.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:?usage: eval_trunks.sh OUT_DIR NAME=PARTS_DIR ...}
shift
[ $# -ge 1 ] || { echo "usage: eval_trunks.sh OUT_DIR NAME=PARTS_DIR ..." >&2; exit 2; }
FLASHLANE=${FLASHLANE:-target/release/flashlane}
MODEL=${MODEL:-models/flashlane-tiny}
PYTHON=${PYTHON:-python3}
SETS=${SETS:-default:120 20261203:240 20261204:240}
[ -x "$FLASHLANE" ] || { echo "eval_trunks: no binary at $FLASHLANE (cargo build --release -p flashlane)" >&2; exit 1; }
mkdir -p "$out/eval"
# The shipped model and the binary copied first: the sets take ~35 minutes, during which the
# checkout's model may be moved out of the tree (a device call's carry; session 55 lost a set
# that way) and the binary rebuilt.
rm -rf "$out/m_shipped"
cp -r "$MODEL" "$out/m_shipped"
cp "$FLASHLANE" "$out/flashlane"
FLASHLANE=$out/flashlane
candidates=(shipped)
for spec in "$@"; do
    name=${spec%%=*}
    parts=${spec#*=}
    case "$name" in ""|*/*|"$spec") echo "eval_trunks: '$spec' is not NAME=PARTS_DIR" >&2; exit 2 ;; esac
    if [ -f "$parts/model.safetensors" ]; then
        # A whole model directory (session 66's s4z11, another shape than MODEL's: no mean).
        rm -rf "$out/m_$name"
        cp -r "$parts" "$out/m_$name"
        candidates+=("$name")
        continue
    fi
    ls "$parts"/trunk_"$name".safetensors.xz.part-* > /dev/null 2>&1 ||
        { echo "eval_trunks: no $parts/trunk_$name.safetensors.xz.part-*" >&2; exit 1; }
    mkdir -p "$out/t_$name"
    cat "$parts"/trunk_"$name".safetensors.xz.part-* | xz -dc > "$out/t_$name/model.safetensors"
    if [ -n "${META:-}" ]; then
        want=$(cut -d' ' -f1 "$META/trunk_$name.sha256")
        got=$(sha256sum "$out/t_$name/model.safetensors" | cut -d' ' -f1)
        [ "$want" = "$got" ] || { echo "eval_trunks: trunk_$name sha256 $got, the device wrote $want" >&2; exit 1; }
    fi
    "$PYTHON" tools/train_tiny/average_models.py "$out/m_$name" "$out/m_shipped" "$out/t_$name" --weights 0,1
    "$PYTHON" tools/train_tiny/average_models.py "$out/m_mean_$name" "$out/m_shipped" "$out/t_$name"
    candidates+=("$name" "mean_$name")
done
for set in $SETS; do
    seed=${set%%:*}
    cases=${set#*:}
    for c in "${candidates[@]}"; do
        dir=$out/m_$c
        seed_arg=()
        [ "$seed" != default ] && seed_arg=(--seed "$seed")
        "$PYTHON" tools/train_tiny/eval_skills.py --flashlane "$FLASHLANE" --model "$dir" --skills count \
            --cases "$cases" "${seed_arg[@]}" --out "$out/eval/${seed}_$c.json" > "$out/eval/${seed}_$c.txt" 2>&1
        echo "$(date -u +%T) $seed $c done" >&2
    done
done
"$PYTHON" - "$out" "$SETS" "${candidates[@]}" <<'PY' | tee "$out/table.md"
import json
import sys

out, sets, candidates = sys.argv[1], sys.argv[2].split(), sys.argv[3:]
ROW = "count, every number of up to 4 digits (both count rows)"
seeds = [s.split(":")[0] for s in sets]
asked = {}
print("Counting within 4 digits right, T = 0 / 0.7 (`eval_skills.py --skills count`; candidates "
      "under the shipped head, `mean_` with the shipped trunk):\n")
print("| candidate | " + " | ".join(seeds) + " | all |")
print("|---" * (len(seeds) + 2) + "|")
for c in candidates:
    cells, total = [], [0, 0]
    for seed in seeds:
        r = json.load(open(f"{out}/eval/{seed}_{c}.json"))["results"][ROW]
        right = [r["0.0"]["right"], r["0.7"]["right"]]
        asked[seed] = r["0.0"]["asked"]
        cells.append(f"{right[0]} / {right[1]}")
        total = [total[0] + right[0], total[1] + right[1]]
    print(f"| {c} | " + " | ".join(cells) + f" | {total[0]} / {total[1]} |")
print("\nasked: " + ", ".join(f"{s} {asked[s]}" for s in seeds) + f", all {sum(asked.values())}")
PY
