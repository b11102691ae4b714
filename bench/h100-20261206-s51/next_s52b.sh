#!/usr/bin/env bash
# Prepared in session 51 (not run), after next_s52a.sh passed: the A/B of session 51's launches
# and swapped chain (bench/gpu_ab.sh: dummy weights, prompt 128, 64 new tokens, 2 interleaved
# rounds, decode tok/s and each variant's ratio to the first).
# 1. Session 50's binary (`55a2dd9`, bench/peers/flashlane_55a2dd9.xz) against session 51's
#    (bench/peers/flashlane.xz) as built (the norm in the MoE's front projection; every norm
#    twin's PTX changed by its new argument): the A3B slice at 1, 2 and 8 streams, Qwen3-0.6B at 1.
# 2. Session 51's binary: as built; its MoE norm apart again (FLASHLANE_MOE_NORM_IN_FRONT=0); the
#    MoE's two launches (FLASHLANE_MOE_SUM_IN_DOWN=1,
#    FLASHLANE_MOE_ROUTE_IN_FRONT=1); the swapped chain (FLASHLANE_MATMUL_SWAP_ROWS=8); all: on
#    the A3B slice at 1, 2 and 8 streams; the swapped chain on Qwen3-0.6B and -4B at 1 and 8; the
#    sum in the down launch and the swapped chain on the A3B slice's FP8 twin at 1 and 2, the
#    swapped chain on Qwen3-4B-FP8 at 1 and 8 (FP8's one stream: 0.87× llama.cpp's Q8_0).
# Carry bench/peers/{flashlane.xz,flashlane_55a2dd9.xz} (the default model moved out); ~480 s.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
xz -dc bench/peers/flashlane_55a2dd9.xz > /tmp/fl_old && chmod +x /tmp/fl_old
ab() {  # OUT_NAME SHAPE STREAMS SETTINGS BINARY...
  local name=$1 shape=$2 streams=$3 settings=$4; shift 4
  SETTINGS="$settings" STREAMS=$streams NEW_TOKENS=64 ROUNDS=2 RUN_TIMEOUT=90 \
    bench/gpu_ab.sh /tmp/ab_$name $shape "$@" > /dev/null 2>&1
  el "A/B $name rc=$?"; cat /tmp/ab_$name/ab.txt /tmp/ab_$name/ab_means.txt | tee -a $OUT/ab.txt
}
MOE=FLASHLANE_MOE_SUM_IN_DOWN=1,FLASHLANE_MOE_ROUTE_IN_FRONT=1
SWAP=FLASHLANE_MATMUL_SWAP_ROWS=8
ab a3b_bins qwen3-next-a3b-slice 1,2,8 "built:FLASHLANE_AB=1" /tmp/fl_old $FL
ab a3b_settings qwen3-next-a3b-slice 1,2,8 "base:FLASHLANE_AB=1 apart:FLASHLANE_MOE_NORM_IN_FRONT=0 moe:$MOE swap:$SWAP all:$MOE,$SWAP" $FL
ab q06_bins qwen3-0.6b 1 "built:FLASHLANE_AB=1" /tmp/fl_old $FL
ab q06_swap qwen3-0.6b 1,8 "base:FLASHLANE_AB=1 swap:$SWAP" $FL
ab q4b_swap qwen3-4b 1,8 "base:FLASHLANE_AB=1 swap:$SWAP" $FL
ab a3b_fp8 qwen3-next-a3b-slice-fp8 1,2 "base:FLASHLANE_AB=1 sum:FLASHLANE_MOE_SUM_IN_DOWN=1 swap:$SWAP" $FL
ab q4b_fp8_swap qwen3-4b-fp8 1,8 "base:FLASHLANE_AB=1 swap:$SWAP" $FL
