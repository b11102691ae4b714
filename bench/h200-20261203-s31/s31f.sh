#!/usr/bin/env bash
# Session 31, call 6 (warm, inline): gpu_dense with the k split forced on (its rounds through
# the split gate/up's fold with its SwiGLU). Carry bench/peers/gpu-tests.tar.xz.
bin=$(mktemp -d); tar -C "$bin" -xJf bench/peers/gpu-tests.tar.xz gpu_dense; FLASHLANE_MATMUL_SPLIT_K=1 FLASHLANE_REQUIRE_GPU=1 timeout 100 $bin/gpu_dense --test-threads 1 > $OUT/gpu_dense_split.log 2>&1; echo rc=$?; grep "test \|test result" $OUT/gpu_dense_split.log
