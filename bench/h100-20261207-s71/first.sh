#!/usr/bin/env bash
# Session 71's first call, whatever GPU comes. On an H200 (none since session 60) the
# whole-model GPU tests come first (issue 12 asks them there), then the walk's kernel tests;
# the walk's A/B is left to the next call on the warm machine. On an H100 `walk.sh`: the walk's
# kernel tests at 4 chunks a step and in k groups, Qwen3-4B's A/B of its forms at 64 streams,
# the k groups' timeline, Qwen3-8B's A/B. Carry bench/peers/{gpu-tests.tar.xz,tiny_model.xz,
# flashlane.xz}; LIMIT as the budget allows.
set -u
if nvidia-smi --query-gpu=name --format=csv,noheader | grep -q H200; then
  echo "an H200: tests.sh"
  bash bench/h100-20261207-s70/tests.sh
else
  echo "not an H200: walk.sh"
  bash bench/h100-20261207-s71/walk.sh
fi
