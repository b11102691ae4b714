#!/usr/bin/env bash
# One training stage of the default model on the GPU machine, its results brought back in files
# small enough for the device tool (at most 8 files of at most 16 MiB each).
#
#     tools/train_tiny/device_stage.sh OUT_DIR NAME -- <train.py arguments, without --out>
#
# Runs `python3 tools/train_tiny/train.py --out /tmp/NAME <arguments>` from the repository root,
# the log tee'd to OUT_DIR/train_log_NAME.txt. Whatever train.py's exit status (a stage cut short
# still leaves its log), it then copies into OUT_DIR what exists of /tmp/NAME:
#   config.json, eval.json, loss.png (as loss_NAME.png),
#   model.safetensors as parts of at most 14 MiB, model.safetensors.part-aa, -ab, ... (the 43 MB
#   model: 3 parts), and model.safetensors.sha256 (the whole file's sha256, as sha256sum writes it).
# That is at most 8 files for a model under 42 MiB. The script exits with train.py's status.
#
# To reassemble, in the folder the files came back to:
#     cat model.safetensors.part-* > model.safetensors && sha256sum -c model.safetensors.sha256
# then put tokenizer.json, tokenizer_config.json and generation_config.json (train.py does not
# change them; they are the --init model's) beside it with config.json to have a model directory.
set -u

usage() { echo "usage: $0 OUT_DIR NAME -- <train.py arguments, without --out>" >&2; exit 2; }
[ $# -ge 3 ] && [ "$3" = "--" ] || usage
out_dir=$1
name=$2
shift 3
case "$name" in
    ""|*/*) echo "$0: NAME must be a plain file name, got '$name'" >&2; exit 2 ;;
esac
for a in "$@"; do
    [ "$a" = "--out" ] && { echo "$0: pass no --out (it is /tmp/$name)" >&2; exit 2; }
done

repo=$(cd "$(dirname "$0")/../.." && pwd)
run_dir=/tmp/$name
mkdir -p "$out_dir"
log=$out_dir/train_log_$name.txt

cd "$repo" || exit 2
PYTHONUNBUFFERED=1 python3 tools/train_tiny/train.py --out "$run_dir" "$@" 2>&1 | tee "$log"
status=${PIPESTATUS[0]}
echo "[device_stage] train.py exited with status $status" | tee -a "$log"

for f in config.json eval.json; do
    [ -f "$run_dir/$f" ] && cp "$run_dir/$f" "$out_dir/$f"
done
[ -f "$run_dir/loss.png" ] && cp "$run_dir/loss.png" "$out_dir/loss_$name.png"

model=$run_dir/model.safetensors
if [ -f "$model" ]; then
    (cd "$run_dir" && sha256sum model.safetensors) > "$out_dir/model.safetensors.sha256"
    split -b 14M "$model" "$out_dir/model.safetensors.part-"
    echo "[device_stage] model.safetensors: $(stat -c %s "$model") bytes," \
        "$(ls "$out_dir"/model.safetensors.part-* | wc -l) parts, $(cut -d' ' -f1 "$out_dir/model.safetensors.sha256")" \
        | tee -a "$log"
else
    echo "[device_stage] no $model" | tee -a "$log"
fi
echo "[device_stage] files in $out_dir: $(ls "$out_dir" | wc -l)" | tee -a "$log"
exit "$status"
