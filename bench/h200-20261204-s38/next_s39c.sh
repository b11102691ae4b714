#!/usr/bin/env bash
# Prepared in session 38: the same-run table against llama.cpp at the defaults of c4d3c88 (the k
# split of 17-32-row rounds and of a prompt's few tiles on; plus whatever next_s39a/b made the
# default: set COMMIT to the packed binary's commit, 9cbec98 as packed in session 41), on the
# shapes those changes touch: Qwen3-4B and -8B (and Qwen3-0.6B, whose kernels they leave as they
# were, as the run's control). Then session 37's next_s38c.sh (the profiles) in a call of its own.
# Carry bench/peers/llama.cpp.tar.xz and bench/peers/flashlane.xz (the default model moved out).
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
# INPUT=bf16 (session 39): flashlane's activations rounded to bf16, the arithmetic llama.cpp's
# bf16 matmuls use, as the CPU table of session 39 compared both ways.
if [ -n "${INPUT:-}" ]; then export FLASHLANE_MATMUL_INPUT=$INPUT; fi
FLASHLANE=$FL FLASHLANE_COMMIT=${COMMIT:-9cbec98} timeout 570 bench/gpu_vs_llamacpp.sh /tmp/vs \
  --shapes qwen3-4b,qwen3-8b,qwen3-0.6b --rounds 2 --deadline 470
el "vs rc=$?"
cp /tmp/vs/table.md /tmp/vs/log.txt $OUT/ 2>/dev/null
tar -C /tmp/vs -cJf $OUT/vs_json.tar.xz $(cd /tmp/vs && ls *.json 2>/dev/null) 2>/dev/null
cat $OUT/table.md
