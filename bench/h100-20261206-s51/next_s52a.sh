#!/usr/bin/env bash
# Prepared in session 51 (not run): the tests of session 51's three ways to fewer launches a
# MoE layer in rounds of up to 2 rows, at the binaries of its last commit.
# (1) The MoE's post-attention norm in its front projection's norm twin, which stores the
#     normalised rows for the experts (on by default: `InputNorm::keep`).
# (2) FLASHLANE_MOE_SUM_IN_DOWN=1: moe_down sums each column of outputs in the last of its blocks
#     to finish, the norm after the layer left to the next layer's first matmul (off).
# (3) FLASHLANE_MOE_ROUTE_IN_FRONT=1: moe_front_route, the front projection whose last block
#     routes and groups the rows (off).
# (4) FLASHLANE_MATMUL_SWAP_ROWS=8: the 16-row chain with the MMA's operands swapped for rounds of
#     up to 8 rows, the dense matmuls and the MoE's experts (off).
# The tensor-core probe (the swapped operands), then their kernel tests (the norm twins', the
# MoE's and the swapped chain's, cold PTX cache), the swapped chain's again under early weights.
# The whole-model tests are next_s52a2.sh's (the next call).
# Carry bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz} (the default model moved out of
# the tree for the call); ~400 s on an H100.
set -u
T0=$(date +%s)
el() { echo "[$(( $(date +%s) - T0 )) s] $*"; }
. bench/unpack_peers.sh
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv > $OUT/gpu.txt 2>&1; cat $OUT/gpu.txt
b=$(mktemp -d); tar -C $b -xJf bench/peers/gpu-tests.tar.xz backend_cuda
# The tensor cores with the operands swapped (what the swapped chain rests on), in seconds.
FLASHLANE_REQUIRE_GPU=1 timeout 60 $b/backend_cuda --ignored tensor_core_numerics_probe --nocapture \
  --test-threads 1 > $OUT/probe_tc.txt 2>&1
el "probe rc=$?"; grep -E "outputs:|test result|panicked" $OUT/probe_tc.txt
FLASHLANE_REQUIRE_GPU=1 timeout 240 $b/backend_cuda norm_twins moe_ swap --test-threads 1 > $OUT/tests_kernels.txt 2>&1
rc=$?; el "backend_cuda norm_twins moe_ rc=$rc"; grep -E "^test |test result|panicked" $OUT/tests_kernels.txt
grep -q "moe_front_route_gives_the_bits" $OUT/tests_kernels.txt || { el "stale packs: repack (bench/pack_gpu_tests.sh --flashlane)"; exit 1; }
# The swapped chain's plain kernels under early weights (the dense models' wait path; the test's
# MoE model compiles without it).
FLASHLANE_MATMUL_EARLY_WEIGHTS=1 FLASHLANE_REQUIRE_GPU=1 timeout 120 $b/backend_cuda swapped_chain norm_twins \
  --test-threads 1 > $OUT/tests_kernels_early.txt 2>&1
rc2=$?; el "backend_cuda swapped_chain norm_twins (early weights) rc=$rc2"; grep -E "^test |test result|panicked" $OUT/tests_kernels_early.txt
[ $rc = 0 ] && [ $rc2 = 0 ] || exit 1
