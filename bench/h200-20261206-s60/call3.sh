#!/usr/bin/env bash
# Session 60, the first call that got a machine (call1/call2 were refused five times): the kernel
# tests of the k split with the persistent split's cases (FLASHLANE_MATMUL_STREAM: x stationary and
# through the ring), the SwiGLU fold into the down's split rows and the gate/up's SwiGLU through every
# kernel; if they pass, the decode A/B of the persistent split (=1: x stationary where its slice fits,
# the down through the ring; =ring everywhere) against the defaults on Qwen3-4B at 32, 48, 64 streams
# and -8B at 64, then Qwen3-4B's kernel timelines at 64 streams. Carry
# bench/peers/{gpu-tests.tar.xz,flashlane.xz} (the default model moved out of the tree; neither step
# reads it); limit 600.
set -u
T0=$(date +%s)
LIMIT=${LIMIT:-570}
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s60_kernels 260 matmul_matches_backend_cpu_gathers swiglu_split_in_fold gate_up_swiglu_gives_the_bits --nocapture
grep -E "cluster fold on" $OUT/tests_s60_kernels.txt
if ! grep -q "test result: ok. 3 passed" $OUT/tests_s60_kernels.txt; then el "kernel tests did not all pass: no A/B"; exit 0; fi
S="default:FLASHLANE_AB=1 stream:FLASHLANE_MATMUL_STREAM=1 ring:FLASHLANE_MATMUL_STREAM=ring"
room 150 s4b && ab s4b qwen3-4b 32,48,64 "$S" $FL
room 80 s8b && ab s8b qwen3-8b 64 "$S" $FL
TL="tl:FLASHLANE_TIMELINE=1 tlstream:FLASHLANE_TIMELINE=1,FLASHLANE_MATMUL_STREAM=1"
room 70 timeline && {
  ab tl_4b qwen3-4b 64 "$TL" $FL > /dev/null
  for f in /tmp/ab_tl_4b/*.round1.err; do
    { echo "=== $(basename $f)"; sed -n '/kernel timeline/,$p' $f | head -45; } >> $OUT/timeline_64.txt
  done
  el "timeline"
}
