#!/usr/bin/env bash
# The first call on an H200: the five whole-model GPU test binaries at the packs' commit
# (`whole_model_tests`), then the three kernel tests that run the warpgroup fold and every form
# of the walk beside the tiles. The llama.cpp table goes in a call of its own (`table.sh`): the
# four packs together pass the 64 MiB carry limit. Carry
# bench/peers/{gpu-tests.tar.xz,tiny_model.xz,flashlane.xz}; limit 600.
set -u
T0=$(date +%s)
. bench/device_ab.sh
gpu_info
room 250 whole_model_tests && whole_model_tests
room 160 "kernel tests" && TEST_THREADS=3 kernel_tests walk 150 \
  wgmma_matmul_gives_the_other_kernels_bits gate_up_swiglu_gives_the_bits norm_in_split_gives_the_bits
