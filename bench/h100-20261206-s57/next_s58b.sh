#!/usr/bin/env bash
# Prepared in session 57 (not run). 1. The test comparing every attention kernel at every
# ATT_KV_AHEAD, and now the staged kernels too (`prep_in_attention_gives_the_bits_of_prep_then_attention`):
# cut by the calls' limits in sessions 56 and 57 behind the other attention tests, here alone
# (~300 s on a cold machine: it compiles the module twice more for each of its head shapes).
# 2. The rest of the kernel test binary's attention tests. ~520 s. Carry
# bench/peers/{flashlane.xz,gpu-tests.tar.xz,tiny_model.xz}, the model moved out; limit 600.
set -u
T0=$(date +%s)
. bench/device_ab.sh
. bench/unpack_peers.sh
gpu_info
kernel_tests s58b_bits 380 prep_in_attention
kernel_tests s58b_attention 140 attention_groups attention_prep_of attention_runs
