#!/usr/bin/env bash
# flashlane vs llama.cpp on the GPU machine, side by side, on the same weights, in one run (see
# bench/gpu_vs_llamacpp.py). Here, before the run: `bench/pack_llamacpp.sh` (llama.cpp's source,
# packed into bench/peers/; with --cuda-build its benchmarks built here too, which saves the GPU
# machine the 340-445 s build) and `cargo build --release -p flashlane --no-default-features --features cuda`; copy the
# stripped binary to bench/peers/flashlane and carry bench/peers. There, from the repo root:
#
#   bench/gpu_vs_llamacpp.sh OUT_DIR [--shapes qwen3-next-a3b-slice,qwen3-0.6b] [--rounds 2] ...
#   bench/gpu_vs_llamacpp.sh OUT_DIR --shapes qwen3-next-a3b-slice --q8-peer \
#       --fp8-only-shapes qwen3-next-80b-a3b-fp8     (issue 12's FP8 goal: 8-bit weights both sides)
#
# Shapes: qwen3-0.6b, qwen3-4b, qwen3-8b, qwen3-next-a3b-slice (bench/make_model.py).
set -euo pipefail
cd "$(dirname "$0")/.."
out=${1:?usage: bench/gpu_vs_llamacpp.sh OUT_DIR [options of bench/gpu_vs_llamacpp.py]}
shift
flashlane=${FLASHLANE:-bench/peers/flashlane}
[ -x "$flashlane" ] || flashlane=target/release/flashlane
[ -f bench/peers/llama.cpp.tar.xz ] || { echo "no bench/peers/llama.cpp.tar.xz: run bench/pack_llamacpp.sh here first" >&2; exit 1; }
exec python3 bench/gpu_vs_llamacpp.py --out "$out" --flashlane "$flashlane" "$@"
