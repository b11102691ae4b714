#!/usr/bin/env bash
# Prepared in session 55 (not run). The same-run table against llama.cpp on Qwen3-0.6B, the A3B
# slice and Qwen3-4B at these defaults (bench/h100-20261205-s46/call5.sh). COMMIT names the
# binaries' commit. Carry bench/peers/{flashlane.xz,llama.cpp.tar.xz}, the default model moved
# out of the tree. ~480 s; call limit 600.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
SHAPES=qwen3-0.6b,qwen3-next-a3b-slice,qwen3-4b LIMIT=${LIMIT:-480} COMMIT=${COMMIT:?set COMMIT} \
  bash bench/h100-20261205-s46/call5.sh
el "table done"
