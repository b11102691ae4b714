#!/usr/bin/env bash
# On the GPU machine, after a training stage: each named stage's trunk (its model.safetensors in
# /tmp/NAME without the `mtp.*` tensors: the head is trained for one trunk, the CPU puts a trunk
# under the shipped head with `average_models.py --weights 0,1`) written to OUT_DIR as
# trunk_NAME.safetensors.xz.part-* (xz, split in 15 MB parts: a device call brings back files of
# bounded size), its sha256 to META_DIR/trunk_NAME.sha256. Stages that left no file are skipped.
#
#   tools/train_tiny/pack_trunks.sh OUT_DIR META_DIR NAME...
#
# Reassemble with `cat trunk_NAME.safetensors.xz.part-* | xz -dc > trunk.safetensors`.
set -euo pipefail
out=${1:?usage: pack_trunks.sh OUT_DIR META_DIR NAME...}
meta=${2:?usage: pack_trunks.sh OUT_DIR META_DIR NAME...}
shift 2
for s in "$@"; do
    [ -f "/tmp/$s/model.safetensors" ] || continue
    python3 - "$s" <<'PY'
import sys
from safetensors.torch import load_file, save_file
s = sys.argv[1]
t = {k: v for k, v in load_file(f"/tmp/{s}/model.safetensors").items() if not k.startswith("mtp.")}
save_file(t, f"/tmp/{s}/trunk.safetensors", metadata={"format": "pt"})
PY
    (cd "/tmp/$s" && sha256sum trunk.safetensors) > "$meta/trunk_$s.sha256"
    xz -T16 -6 -c "/tmp/$s/trunk.safetensors" | split -b 15M - "$out/trunk_$s.safetensors.xz.part-"
done
