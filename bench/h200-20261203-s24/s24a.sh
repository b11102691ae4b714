#!/usr/bin/env bash
# Session 24, call 1. Carry bench/peers/{gpu-tests.tar.xz,flashlane.xz,flashlane_s23.xz,tiny_model.xz}
# with the default model moved out of the tree. The warpgroup matmul's second version: its
# kernel test, its kernel times against the tiles, its prompts against the tiles' and the first
# version's (`flashlane_s23.xz`, 26ce66b) on the four shapes; the one-row deep fit (Qwen3-8B's o
# and down) old against new at 1 and 8 streams; then every GPU test at this commit with the
# warpgroup matmul forced on from 128 rows (FLASHLANE_MATMUL_WGMMA=1), more than any default
# would give it (off, FLASHLANE_MATMUL_WGMMA=0, if its kernel test failed).
set -u
T0=$(date +%s)
el() { echo $(( $(date +%s) - T0 )); }
xz -T16 -dc bench/peers/tiny_model.xz > models/flashlane-tiny/model.safetensors
NEW=/tmp/fl_new; xz -dc bench/peers/flashlane.xz > $NEW; chmod +x $NEW
OLD=/tmp/fl_s23; xz -dc bench/peers/flashlane_s23.xz > $OLD; chmod +x $OLD
B=$(mktemp -d); tar -C $B -xJf bench/peers/gpu-tests.tar.xz
timeout 120 $B/backend_cuda wgmma --test-threads 1 > $OUT/wgmma_test.txt 2>&1
wg=$?; echo "wgmma test rc=$wg at $(el) s"; grep -E "test result|panicked|differs" $OUT/wgmma_test.txt | head -5
timeout 100 $B/backend_cuda --ignored matmul_kernel_times --nocapture --test-threads 1 > $OUT/matmul_times.txt 2>&1
echo "times rc=$? at $(el) s"
grep -E "(4B|8B) (gate_up|down) rows +(128|512|2048|8192):" $OUT/matmul_times.txt | sed -E 's/Narrow.*Tiled /... Tiled /'
grep -E "8B (o|down) rows +(1|8):" $OUT/matmul_times.txt | sed -E 's/Narrow.*//'
ab() {  # label shape streams settings binaries...
  local label=$1 shape=$2 streams=$3 settings=$4; shift 4
  if [ $(el) -gt 380 ]; then echo "A/B $label skipped at $(el) s" | tee -a $OUT/ab.txt; return; fi
  SETTINGS="$settings" ROUNDS=${ROUNDS:-1} STREAMS=$streams timeout $((585 - $(el))) bench/gpu_ab.sh /tmp/ab-$label $shape "$@" > /dev/null 2>&1
  echo "A/B $label rc=$? at $(el) s"; { echo "== $label"; cat /tmp/ab-$label/ab.txt; } | tee -a $OUT/ab.txt
}
if [ $wg = 0 ]; then
  ab 8b-old qwen3-8b 1,8,64 "tiles:FLASHLANE_MATMUL_WGMMA=0 w128:FLASHLANE_MATMUL_WGMMA=1" $OLD
  ab 8b qwen3-8b 1,8,64 "tiles:FLASHLANE_MATMUL_WGMMA=0 w128:FLASHLANE_MATMUL_WGMMA=1 default:FLASHLANE_AB=1" $NEW
  ab 4b qwen3-4b 1,64 "tiles:FLASHLANE_MATMUL_WGMMA=0 w128:FLASHLANE_MATMUL_WGMMA=1 default:FLASHLANE_AB=1" $NEW
  ab 06b qwen3-0.6b 1,64 "tiles:FLASHLANE_MATMUL_WGMMA=0 default:FLASHLANE_AB=1" $NEW
  ab a3b qwen3-next-a3b-slice 1,64 "tiles:FLASHLANE_MATMUL_WGMMA=0 default:FLASHLANE_AB=1" $NEW
  PROMPT_TOKENS=4096 NEW_TOKENS=8 ab 8b-long qwen3-8b 1 "tiles:FLASHLANE_MATMUL_WGMMA=0 w128:FLASHLANE_MATMUL_WGMMA=1 default:FLASHLANE_AB=1" $NEW
else
  ab 8b qwen3-8b 1,8 "tiles:FLASHLANE_MATMUL_WGMMA=0" $OLD $NEW
fi
if [ $wg = 0 ]; then TS="wgmma:FLASHLANE_MATMUL_WGMMA=1"; else TS="tiles:FLASHLANE_MATMUL_WGMMA=0"; fi
SETTINGS="$TS" TESTS_SECONDS=$((588 - $(el))) timeout $((590 - $(el))) bench/gpu_session.sh $OUT/session
echo "total $(el) s"
