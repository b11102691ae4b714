#!/usr/bin/env bash
# Session 31, call 4 (warm, run inline as this command): where a Qwen3-4B 64-stream round goes
# at 0cb43d3 (ncu, graphs off). Carry bench/peers/flashlane.xz.
. bench/unpack_peers.sh; NEW_TOKENS=8 RUN_TIMEOUT=200 bench/gpu_profile.sh /tmp/prof qwen3-4b $FL 64 > /tmp/p.log 2>&1; echo rc=$?; tail -5 /tmp/p.log; cp /tmp/prof/*.txt $OUT/ 2>/dev/null; ls /tmp/prof | head; head -50 /tmp/prof/*.txt
