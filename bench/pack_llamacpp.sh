#!/usr/bin/env bash
# Packs the llama.cpp source vendored in the `llama-cpp-python` sdist into
# bench/peers/llama.cpp.tar.xz (git-ignored), small enough to travel to the GPU machine with the
# working tree: only what `llama-bench`, `llama-batched-bench`, `llama-quantize` and the HF → GGUF
# converter need (the CPU and CUDA backends, `common`, the three tools, `gguf-py`, `conversion/`).
# Nothing of it is committed. bench/gpu_vs_llamacpp.sh builds it there, unless --cuda-build built
# the benchmarks here already (CUDA for sm_90, from a toolkit assembled out of NVIDIA's PyPI wheels
# by bench/cuda_toolkit_from_wheels.sh; ~40 minutes on 2 cores, against 340-445 s of the GPU
# machine's 30 device-minutes a session): the pack then holds llama.cpp/build/bin/, which
# gpu_vs_llamacpp.py runs where it can (and builds there where it cannot).
#
#     bench/pack_llamacpp.sh [--cuda-build] [SDIST.tar.gz]     # without SDIST: pip download it
#     (CUDA_TOOLKIT_DIR: where the toolkit is assembled, default ~/.cache/flashlane/cuda13)
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
out=bench/peers/llama.cpp.tar.xz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

cuda_build=no
if [ "${1:-}" = --cuda-build ]; then
  cuda_build=yes
  command -v cmake >/dev/null ||
    { echo "pack_llamacpp.sh --cuda-build needs cmake: python3 -m pip install cmake" >&2; exit 1; }
  shift
fi
sdist="${1:-}"
if [ -z "$sdist" ]; then
  python3 -m pip download -q --no-deps "llama-cpp-python==$VERSION" -d "$work"
  sdist=$(ls "$work"/llama_cpp_python-*.tar.gz)
fi
tar xzf "$sdist" -C "$work"
src=$(ls -d "$work"/llama_cpp_python-*/vendor/llama.cpp)

# What the two benchmarks and the converter never read.
( cd "$src"
  rm -rf models docs media benches tests examples pocs app .github
  for d in ggml/src/ggml-*/; do
    case "$d" in ggml/src/ggml-cpu/|ggml/src/ggml-cuda/) ;; *) rm -rf "$d" ;; esac
  done
  for d in tools/*/; do
    case "$d" in tools/batched-bench/|tools/llama-bench/|tools/quantize/) ;; *) rm -rf "$d" ;; esac
  done
  # Only the tools the benchmarks run (quantize for --q8-peer); the vendored audio library
  # serves the multimodal tools alone.
  cat > tools/CMakeLists.txt <<'EOF'
# Packed for flashlane's benchmarks: the tools they run.
find_package(Threads REQUIRED)
llama_add_compile_flags()
add_subdirectory(batched-bench)
add_subdirectory(llama-bench)
add_subdirectory(quantize)
EOF
  sed -i '/add_subdirectory(miniaudio)/d' vendor/CMakeLists.txt
  rm -rf vendor/miniaudio
)
if [ "$cuda_build" = yes ]; then
  toolkit=${CUDA_TOOLKIT_DIR:-$HOME/.cache/flashlane/cuda13}
  bench/cuda_toolkit_from_wheels.sh "$toolkit"
  # The harness's configuration (bench/gpu_vs_llamacpp.py), made to run on another machine: the
  # ggml and llama libraries beside the binaries, found through $ORIGIN (one copy of the CUDA
  # kernels for the three tools: each statically linked would triple the pack), no
  # -march=native for the CPU backend; cudart and cuBLAS 13 are the GPU machine's own (linked
  # here against the toolkit's, and the driver's stub). Machine code for sm_90 only ("90-real":
  # the H200 runs that code either way; the PTX that "90" adds, for GPUs yet to come, would
  # make the pack too large to travel beside the tree).
  ( cd "$src"
    PATH="$toolkit/bin:$PATH" cmake -B build -DGGML_CUDA=ON -DCMAKE_CUDA_ARCHITECTURES=90-real \
      -DLLAMA_CURL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_BUILD_SERVER=OFF \
      -DLLAMA_BUILD_APP=OFF -DBUILD_SHARED_LIBS=ON -DCMAKE_BUILD_RPATH_USE_ORIGIN=ON \
      -DGGML_NATIVE=OFF -DCUDAToolkit_ROOT="$toolkit" -DCMAKE_CUDA_COMPILER="$toolkit/bin/nvcc" \
      -DCMAKE_EXE_LINKER_FLAGS="-Wl,-rpath-link,$toolkit/lib64:$toolkit/lib64/stubs" \
      >"$work/cmake.log" 2>&1 || { tail -30 "$work/cmake.log"; exit 1; }
    PATH="$toolkit/bin:$PATH" cmake --build build -j "$(nproc)" \
      --target llama-bench llama-batched-bench llama-quantize >"$work/build.log" 2>&1 ||
      { tail -30 "$work/build.log"; exit 1; }
    mkdir -p "$work/bin"
    cp -P build/bin/llama-bench build/bin/llama-batched-bench build/bin/llama-quantize \
      build/bin/*.so* "$work/bin/"
    rm -rf build
    mkdir -p build
    mv "$work/bin" build/bin
    find build/bin -type f -exec strip {} + )
fi
mkdir -p bench/peers
tar cJf "$out" -C "$(dirname "$src")" llama.cpp
echo "packed $(du -h "$out" | cut -f1) into $out (llama-cpp-python $VERSION)"
