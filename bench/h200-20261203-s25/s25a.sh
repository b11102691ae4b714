#!/usr/bin/env bash
# Session 25, call 2 (call 1 was bench/h200-20261203-s24/s24b.sh: stage 4n and the GPU tests at
# edce50d, `call1/`). Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz,llama.cpp.tar.xz}
# with the default model moved out of the tree. In the background: llama.cpp built and the A3B
# slice's, Qwen3-8B's and Qwen3-4B's checkpoints made for call 3's same-run table. Meanwhile:
# where the tiles' time goes at 64 and 4,096 rows (`tiled_define_times`: stages, launch bounds,
# bf16 inputs, the copies alone, the products alone), ncu's full set on the k split at 64 rows
# and on the tiles at 4,096 (Qwen3-8B's gate/up), and where a Qwen3-8B 1-stream token and
# 64-stream round go at this commit (bench/gpu_profile.sh).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
FLASHLANE_COMMIT=prep nice -n 15 bench/gpu_vs_llamacpp.sh /tmp/prep \
  --shapes qwen3-next-a3b-slice,qwen3-8b,qwen3-4b --prepare-only --keep-models --flashlane $FL \
  > /tmp/prep.log 2>&1 &
PREP=$!
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
timeout 200 $B/backend_cuda --ignored tiled_define_times --nocapture --test-threads 1 > $OUT/tiled_times.txt 2>&1
echo "tiled times rc=$? at $(el) s"; grep -E "8B gate_up" $OUT/tiled_times.txt | sed -E 's/ +/ /g'
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1)
echo "ncu: $ncu"
# As built, matrices in order: each runs split@64 (31 launches of the split kernel), tiled@64 (31
# of the tiles), tiled@4096 (6 of the tiles); 8B gate_up is the seventh.
FLASHLANE_TIMES_VARIANT="as built" timeout 150 $ncu --set full -k matmul_bf16_tiled_split --launch-skip 186 \
  --launch-count 1 $B/backend_cuda --ignored tiled_define_times --nocapture --test-threads 1 > $OUT/ncu_split64.txt 2>&1
echo "ncu split rc=$? at $(el) s"
FLASHLANE_TIMES_VARIANT="as built" timeout 150 $ncu --set full -k matmul_bf16_tiled --launch-skip 253 \
  --launch-count 1 $B/backend_cuda --ignored tiled_define_times --nocapture --test-threads 1 > $OUT/ncu_tiled4096.txt 2>&1
echo "ncu tiled rc=$? at $(el) s"
NEW_TOKENS=12 RUN_TIMEOUT=100 timeout 230 bench/gpu_profile.sh /tmp/prof qwen3-8b $FL 1,64 > /dev/null 2>&1
echo "profile rc=$? at $(el) s"; cp /tmp/prof/*.txt $OUT/ 2>/dev/null
while kill -0 $PREP 2>/dev/null && [ $(el) -lt 585 ]; do sleep 2; done
tail -8 /tmp/prep.log; cp /tmp/prep.log $OUT/prep.log
ls -la $OUT
echo "total $(el) s"
