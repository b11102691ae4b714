#!/usr/bin/env bash
# Session 37, call 4: as call 3, the fold in the split now four outputs a thread and two rows a pass
# (16 loads in flight; call 3 lost 27 %), and FLASHLANE_MATMUL_SPLIT_FOLD_IN=order (the grid of
# residues side by side, the fold apart) to tell the order from the fold. The split with its fold (matmul_bf16_tiled_split_fold,
# FLASHLANE_MATMUL_SPLIT_FOLD_IN=1; off by default). The matmul and SwiGLU kernel tests (both run
# it beside every other kernel, bit for bit), then Qwen3-4B and -8B at 48 and 64 streams, two
# rounds, against the separate fold (the GPU test binaries in a call of their own, where it won).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
for f in matmul_matches_backend gate_up_swiglu; do
  FLASHLANE_REQUIRE_GPU=1 timeout 60 $b/backend_cuda $f --test-threads 1 >> $OUT/tests_fold4.txt 2>&1
  el "backend_cuda $f rc=$?"
done; grep -E "^test .*(ok|FAILED)|test result|panicked" $OUT/tests_fold4.txt | tail -8
S="base:FLASHLANE_AB=1 order:FLASHLANE_MATMUL_SPLIT_FOLD_IN=order fold:FLASHLANE_MATMUL_SPLIT_FOLD_IN=1"
for shape in qwen3-4b qwen3-8b; do
  SETTINGS="$S" STREAMS=48,64 ROUNDS=2 timeout 170 bench/gpu_ab.sh /tmp/ab_$shape $shape $FL > /tmp/ab_$shape.log 2>&1
  el "$shape rc=$?"
  cat /tmp/ab_$shape/ab.txt | tee -a $OUT/ab_fold.txt
done
win=$(python3 - $OUT/ab_fold.txt <<'PY'
import re, sys, collections
dec = collections.defaultdict(list)
for line in open(sys.argv[1]):
    m = re.match(r"bin1\.(\w+) .*round (\d+): .*64: (\d+) dec", line)
    if m:
        dec[m.group(1)].append(int(m.group(3)))
b, f = dec["base"], dec["fold"]
ok = len(b) == 4 and len(f) == 4 and all(sum(f[i:i+2]) >= 1.02 * sum(b[i:i+2]) for i in (0, 2))
print("yes" if ok else "")
PY
)
el "fold won: '${win:-no}'"
