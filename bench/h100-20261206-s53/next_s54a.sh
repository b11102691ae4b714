#!/usr/bin/env bash
# Prepared in session 53 (not run). Two kernels of session 53, tested then measured:
# 1. The tiles' k split laid out otherwise (`SplitLayout`, kernels/mod.rs). Qwen3-4B's 64-stream
#    round ran its split matmuls at 1.2-1.5 TB/s in session 52's profile (gate/up 65 us a layer:
#    1,216 blocks of five chunks each; o/down 160 blocks), 5.4 of the round's 8.6 ms; 4B and 8B
#    at 64 streams are 0.91x llama.cpp (1.5x asked). FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 puts
#    a tile's residue blocks next to each other in the grid; FLASHLANE_MATMUL_SPLIT_GROUP=N has a
#    block walk N residues (each partial written apart). Measured at 32 (the 32-row split) and
#    64 streams (the 64-row split); prefill (a 128-token prompt's split o/down/qkv) in the same
#    rows. Qwen3-8B is next_s54b.sh's.
# 2. `matmul_bf16_swap_stream` (FLASHLANE_MATMUL_SWAP_STREAM=1): a one-tile swapped matmul of
#    one wave copies all its weights to shared memory before the wait for the kernel ahead.
#    Qwen3-0.6B's one-stream attention output and MLP down (64 blocks, 7.0 us each in ncu: 392 of
#    a token's 1,276 us) and the A3B slice's 2,048-output projections (128 blocks, 145 of
#    1,410 us); 0.6B and the slice at one stream are 1.4x llama.cpp (1.5x asked).
# Both keep the bits: the kernel tests that say so on the GPU first (every split layout compiled
# by override; the streamed kernel against the 16-row ones), then the A/B.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz} (rebuilt at the commit that prepared this,
# bench/pack_gpu_tests.sh --flashlane) and tiny_model.xz, the default model moved out of the
# tree. ~400 s on an H100 (a fresh machine compiles the kernels once for the tests).
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
FLASHLANE_REQUIRE_GPU=1 timeout 200 $b/backend_cuda every_split_layout matmul_matches swapped stream \
  --test-threads 1 > $OUT/tests_s54a.txt 2>&1
el "backend_cuda split/swapped/stream tests rc=$?"; grep -E "^test |test result|panicked|FAILED" $OUT/tests_s54a.txt | head -20
STREAM="base:FLASHLANE_AB=1 stream:FLASHLANE_MATMUL_SWAP_STREAM=1"
ab q06_stream qwen3-0.6b 1,2 "$STREAM" $FL
ab a3b_stream qwen3-next-a3b-slice 1,2 "$STREAM" $FL
LAYOUTS="base:FLASHLANE_AB=1 first:FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 g2first:FLASHLANE_MATMUL_SPLIT_GROUP=2,FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 g4first:FLASHLANE_MATMUL_SPLIT_GROUP=4,FLASHLANE_MATMUL_SPLIT_RESIDUE_FIRST=1 g8:FLASHLANE_MATMUL_SPLIT_GROUP=8"
ab q4b_layout qwen3-4b 32,64 "$LAYOUTS" $FL
