#!/usr/bin/env bash
# Fetches the wheels of flash-linear-attention (fla: Triton kernels of the Gated DeltaNet's chunked
# delta rule) and what it needs beside PyTorch into .whl/fla/ (git-ignored), for the GPU machine,
# which has no network: carry `.whl` with the call and install them there with
#   pip install --no-deps --no-index .whl/fla/*.whl
# transformers then runs Qwen3-Next's linear-attention layers on fla's kernels instead of its own
# PyTorch fallback, whose sequential chunk loop bounds training speed (train.py logs which one runs;
# --require-fla stops when fla is missing). Nothing fetched is committed.
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl/fla
python3 -m pip download --no-deps --dest .whl/fla \
  flash-linear-attention==0.6.0 fla-core==0.6.0 einops==0.8.1
ls -l .whl/fla
