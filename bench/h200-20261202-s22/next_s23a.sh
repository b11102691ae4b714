#!/usr/bin/env bash
# For the next device session (written in session 22, not yet run). Carry
# bench/peers/{gpu-tests.tar.xz,flashlane.xz,tiny_model.xz,llama.cpp.tar.xz}
# (bench/pack_gpu_tests.sh --flashlane, bench/pack_llamacpp.sh) with the default model moved out
# of the tree. In the background: llama.cpp built and the four shapes' checkpoints made for
# next_s23b.sh's same-run table. Meanwhile: the matmul kernel times (now with Qwen3-8B's
# matrices: its o and down run on 171 blocks at one row, `call4/profile_qwen3-8b_s1.txt`), the
# k split forced on all of a layer (FLASHLANE_MATMUL_SPLIT_K=1) against the default (no split)
# on Qwen3-0.6B and the A3B slice at 48 and 64 streams, the 8B's one-row kernel choice by the
# existing knobs (narrow for up to 128 wide blocks; every wide matmul at 4 n-tiles), the 4B
# shape's layer split in part, the warpgroup matmul's test and A/B, and the GPU tests.
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
FL=/tmp/fl; xz -dc bench/peers/flashlane.xz > $FL; chmod +x $FL
FLASHLANE_COMMIT=prep nice -n 15 bench/gpu_vs_llamacpp.sh $OUT/prep \
  --shapes qwen3-0.6b,qwen3-4b,qwen3-8b,qwen3-next-a3b-slice --prepare-only --keep-models --flashlane $FL \
  > /tmp/prep.log 2>&1 &
PREP=$!
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
timeout 90 $B/backend_cuda --ignored matmul_kernel_times --nocapture --test-threads 1 > $OUT/matmul_times.txt 2>&1
echo "times rc=$? at $(el) s"; grep -E "8B (o|down) rows +1:" $OUT/matmul_times.txt
# The warpgroup matmul (FLASHLANE_MATMUL_WGMMA, written in session 22): its kernel test first,
# then, if it passed, prefill with it on the 4B and 8B shapes.
timeout 120 $B/backend_cuda wgmma --test-threads 1 > $OUT/wgmma_test.txt 2>&1
wg=$?; echo "wgmma test rc=$wg at $(el) s"; grep -E "test result|panicked|differs" $OUT/wgmma_test.txt | head -5
grep -E "(4B|8B) gate_up rows +(512|8192):" $OUT/matmul_times.txt | sed -E 's/Narrow.*Tiled /... Tiled /'
if [ $wg = 0 ]; then
  for shape in qwen3-4b qwen3-8b; do
    SETTINGS="base:FLASHLANE_AB=1 wgmma:FLASHLANE_MATMUL_WGMMA=1" ROUNDS=1 STREAMS=1,64 timeout 100 \
      bench/gpu_ab.sh /tmp/ab-wg-$shape $shape $FL > /dev/null 2>&1
    echo "A/B wgmma $shape rc=$? at $(el) s"; { echo "== $shape wgmma"; cat /tmp/ab-wg-$shape/ab.txt; } | tee -a $OUT/ab.txt
  done
fi
for shape in qwen3-0.6b qwen3-next-a3b-slice; do
  SETTINGS="default:FLASHLANE_AB=1 all:FLASHLANE_MATMUL_SPLIT_K=1" ROUNDS=1 STREAMS=48,64 timeout 90 \
    bench/gpu_ab.sh /tmp/ab-$shape $shape $FL > /dev/null 2>&1
  echo "A/B $shape rc=$? at $(el) s"; { echo "== $shape"; cat /tmp/ab-$shape/ab.txt; } | tee -a $OUT/ab.txt
done
SETTINGS="default:FLASHLANE_AB=1 narrow128:FLASHLANE_MATMUL_NARROW_MAX_BLOCKS=128 nofit:FLASHLANE_MATMUL_FIT=0" \
  ROUNDS=1 STREAMS=1,8 timeout 100 bench/gpu_ab.sh /tmp/ab-8b qwen3-8b $FL > /dev/null 2>&1
echo "A/B 8B rc=$? at $(el) s"; { echo "== qwen3-8b"; cat /tmp/ab-8b/ab.txt; } | tee -a $OUT/ab.txt
# Why a layer split in part decoded slower than none or all split (session 22): the 4B shape at
# 64 streams all split (the default), q/k/v and gate/up only (6,144 outputs or more), none; each
# also without programmatic dependent launch. If the half split's loss goes with PDL off, it
# is in how the two kinds of kernel overlap.
SETTINGS="all:FLASHLANE_AB=1 half:FLASHLANE_MATMUL_SPLIT_K_MIN_OUTPUTS=6144 off:FLASHLANE_MATMUL_SPLIT_K=0 \
all_nopdl:FLASHLANE_PDL=0 half_nopdl:FLASHLANE_MATMUL_SPLIT_K_MIN_OUTPUTS=6144,FLASHLANE_PDL=0 \
off_nopdl:FLASHLANE_MATMUL_SPLIT_K=0,FLASHLANE_PDL=0" ROUNDS=1 STREAMS=64 timeout 120 \
  bench/gpu_ab.sh /tmp/ab-4b qwen3-4b $FL > /dev/null 2>&1
echo "A/B 4B rc=$? at $(el) s"; { echo "== qwen3-4b"; cat /tmp/ab-4b/ab.txt; } | tee -a $OUT/ab.txt
SETTINGS="" TESTS_SECONDS=200 timeout 205 bench/gpu_session.sh $OUT/session
echo "tests at $(el) s; waiting for the llama.cpp build"
while kill -0 $PREP 2>/dev/null && [ $(el) -lt 585 ]; do sleep 2; done
tail -5 /tmp/prep.log
echo "total $(el) s"
