#!/usr/bin/env bash
# Session 70: the walk (FLASHLANE_MATMUL_WALK=1, `matmul_walk.cu`), first on a GPU. On an H200
# first the five whole-model GPU tests at the defaults (issue 12 asks them on the H200; the walk
# is off by default), then the three kernel tests that run the walk beside the tiles and the
# warpgroup fold (TEST_THREADS=3), then Qwen3-4B at 64 streams (one interleaved round: the
# default against the walk, W's rows copied apart and by TMA alone and in clusters of 2 and 4
# sharing x) and their kernel timelines, then 48 streams, in the time left. Carry
# gpu-tests.tar.xz, tiny_model.xz, flashlane.xz; LIMIT ≤ 590.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
if grep -q H200 $OUT/gpu.txt && room 250 whole_model_tests; then whole_model_tests; fi
room 190 "walk kernel tests" && TEST_THREADS=3 kernel_tests walk 180 \
  wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits
# The A/B runs whatever the tests said (a test that hangs on one form of the walk would hide the
# others' speed); a form whose bits the tests did not confirm is not a result.
grep -q "test result: ok. 3 passed" $OUT/tests_walk.txt 2>/dev/null || el "the walk's kernel tests did not all pass"
for streams in 64 48; do
  room 75 "A/B at $streams" || break
  settings="default:FLASHLANE_AB=1 walk:FLASHLANE_MATMUL_WALK=1 tma2:FLASHLANE_MATMUL_WALK=tma2"
  [ $streams = 64 ] && settings+=" tma:FLASHLANE_MATMUL_WALK=tma tma4:FLASHLANE_MATMUL_WALK=tma4"
  SETTINGS="$settings" STREAMS=$streams NEW_TOKENS=64 ROUNDS=1 \
    RUN_TIMEOUT=60 bench/gpu_ab.sh /tmp/ab_$streams qwen3-4b $FL > /dev/null 2>&1
  el "A/B $streams rc=$?"; cat /tmp/ab_$streams/ab.txt | tee -a $OUT/ab.txt
  if [ $streams = 64 ] && room 100 timeline; then
    timeline 4b qwen3-4b 64 "walk:FLASHLANE_MATMUL_WALK=1,FLASHLANE_TIMELINE=1 tma2:FLASHLANE_MATMUL_WALK=tma2,FLASHLANE_TIMELINE=1 default:FLASHLANE_TIMELINE=1" $FL
  fi
done
exit 0

