#!/usr/bin/env bash
# Downloads what tools/train_tiny/eval_skills.py needs beside the standard library (the `openai`
# client, jinja2, and theirs) as wheels for the GPU machine's Python 3.12 on x86-64 Linux into
# .whl/eval/ (git-ignored, ~6 MB), so a device call can screen a training stage there: carry
# `.whl`, then
#   python3 -m pip install -q --no-deps --no-index --target /tmp/evalsite .whl/eval/*.whl
#   PYTHONPATH=/tmp/evalsite python3 tools/train_tiny/eval_skills.py --serve-arg=--device --serve-arg=cuda …
set -euo pipefail
cd "$(dirname "$0")/../.."
mkdir -p .whl/eval
python3 -m pip download -q openai jinja2 --python-version 3.12 --platform manylinux2014_x86_64 \
    --platform manylinux_2_17_x86_64 --only-binary=:all: -d .whl/eval
ls .whl/eval
du -sh .whl/eval
