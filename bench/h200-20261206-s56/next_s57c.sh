#!/usr/bin/env bash
# Prepared in session 56 (not run). The same-run table against llama.cpp on the shapes session 56
# had no time for, on whatever GPU comes: Qwen3-4B and Qwen3-8B (bf16; and FP8 dummy weights
# against llama.cpp's Q8_0 of the same bf16 GGUF), issue 12's 1-stream (80 % of the copy
# bandwidth the table now measures) and 64-stream (1.5×) goals. COMMIT names the binaries'
# commit. Carry bench/peers/{flashlane.xz,llama.cpp.tar.xz}, the model moved out; limit 600.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
SHAPES=qwen3-4b,qwen3-8b LIMIT=${LIMIT:-570} COMMIT=${COMMIT:?set COMMIT} \
  bash bench/h100-20261205-s46/call5.sh
el "table done"
