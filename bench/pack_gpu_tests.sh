#!/usr/bin/env bash
# Builds the six GPU test binaries (and, with --flashlane, the CUDA flashlane binary) here, strips
# them and packs each set as xz into bench/peers/ (git-ignored), ready to `carry` to the GPU
# machine, where bench/gpu_tests.sh runs the tests.
#
#   bench/pack_gpu_tests.sh [--flashlane]
#
# Sizes: the tracked tree is ~63 MB of the 64 MiB a device call carries. The tests (~3.1 MB)
# fit; the flashlane binary (~3.6 MB) fits beside them only with
# models/flashlane-tiny/model.safetensors (43 MB) moved out of the tree for the call (and back
# after it): --flashlane also packs that model as bench/peers/tiny_model.xz (~30 MB), which
# bench/gpu_tests.sh unpacks there where the model is missing.
set -euo pipefail
cd "$(dirname "$0")/.."
mkdir -p bench/peers
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cargo test -p backend-cuda --features cuda --release --no-run 2>"$tmp/build.log" || { cat "$tmp/build.log"; exit 1; }
for t in backend_cuda gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults; do
  # The newest executable of each test target (cargo keeps older hashes beside it).
  f=$(ls -t target/release/deps/"$t"-* | grep -v '\.d$' | head -1)
  cp "$f" "$tmp/$t"
  strip "$tmp/$t"
done
tar -C "$tmp" -cf - backend_cuda gpu_conformance gpu_dense gpu_target gpu_fixtures gpu_faults |
  xz -T2 -9 >bench/peers/gpu-tests.tar.xz
ls -l bench/peers/gpu-tests.tar.xz
if [ "${1:-}" = --flashlane ]; then
  # The default model, for calls that move it out of the tree to carry the flashlane binary
  # (bench/gpu_tests.sh unpacks it where it is missing); made again when the model changed.
  model=models/flashlane-tiny/model.safetensors
  if [ ! -f bench/peers/tiny_model.xz ] || [ "$model" -nt bench/peers/tiny_model.xz ]; then
    xz -T2 -6 -c "$model" >bench/peers/tiny_model.xz
  fi
  ls -l bench/peers/tiny_model.xz
  cargo build --release -p flashlane --no-default-features --features cuda
  cp target/release/flashlane "$tmp/flashlane"
  strip "$tmp/flashlane"
  xz -T2 -9 -c "$tmp/flashlane" >bench/peers/flashlane.xz
  ls -l bench/peers/flashlane.xz
fi
