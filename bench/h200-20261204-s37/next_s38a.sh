#!/usr/bin/env bash
# Prepared in session 37 for the next device session; two switches, both off by default and the
# same bits by construction, to measure and then make the default:
# - FLASHLANE_MATMUL_SPLIT32=1: the k split of 17-32-row rounds on 32-row blocks (call 6: Qwen3-4B
#   +4.6-6.0 %, -8B +6.3-6.4 % at 24-32 streams; the matmul kernel test passed);
# - FLASHLANE_MATMUL_SPLIT_K_PROMPTS=1: a prompt's matmuls with fewer than 128 tile blocks (4B's
#   o, down and q/k/v for one 128-token prompt, now on the 16-row kernels that read each weight
#   8 times) split k on the tiles instead (not yet run on a GPU).
# The matmul and SwiGLU kernel tests with both on, then Qwen3-4B and -8B at 1, 2, 17, 24 and 32
# streams, two rounds (the 1-2-stream rows' prefill is the prompt split's figure). The six GPU
# test binaries with both on: next_s38b.sh.
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
for f in matmul_matches_backend gate_up_swiglu; do
  FLASHLANE_MATMUL_SPLIT32=1 FLASHLANE_MATMUL_SPLIT_K_PROMPTS=1 FLASHLANE_REQUIRE_GPU=1 \
    timeout 60 $b/backend_cuda $f --test-threads 1 >> $OUT/tests_split.txt 2>&1
  el "backend_cuda $f rc=$?"
done; grep -E "^test .*(ok|FAILED)|test result|panicked" $OUT/tests_split.txt | tail -8
S="base:FLASHLANE_AB=1 s32:FLASHLANE_MATMUL_SPLIT32=1 prompts:FLASHLANE_MATMUL_SPLIT_K_PROMPTS=1"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S" STREAMS=1,2,17,24,32 ROUNDS=2 timeout 220 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_split.txt
done
