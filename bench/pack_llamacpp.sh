#!/usr/bin/env bash
# Packs the llama.cpp source vendored in the `llama-cpp-python` sdist into
# bench/peers/llama.cpp.tar.xz (git-ignored), small enough to travel to the GPU machine with the
# working tree: only what `llama-bench`, `llama-batched-bench`, `llama-quantize` and the HF → GGUF
# converter need (the CPU and CUDA backends, `common`, the three tools, `gguf-py`, `conversion/`).
# Nothing of it is committed. bench/gpu_vs_llamacpp.sh builds it there.
#
#     bench/pack_llamacpp.sh [SDIST.tar.gz]     # without an argument: pip download it
set -euo pipefail
cd "$(dirname "$0")/.."
VERSION="${LLAMA_CPP_PYTHON_VERSION:-0.3.36}"
out=bench/peers/llama.cpp.tar.xz
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT

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
mkdir -p bench/peers
tar cJf "$out" -C "$(dirname "$src")" llama.cpp
echo "packed $(du -h "$out" | cut -f1) into $out (llama-cpp-python $VERSION)"
