#!/usr/bin/env bash
# Assembles a CUDA 13 toolkit for compiling (nvcc, cicc, ptxas, headers, cudart and cuBLAS to
# link against) from NVIDIA's PyPI wheels into DIR, on a machine without a GPU or a CUDA install,
# so that bench/pack_llamacpp.sh --cuda-build can build llama.cpp's CUDA benchmarks here instead of
# on the GPU machine (where the build took 340-445 s of each session's 30 device-minutes).
# Linking needs libcuda.so, which only a driver installs: DIR/lib64/stubs/libcuda.so is a stub
# with the driver calls ggml-cuda makes (SONAME libcuda.so.1: the real driver library is the one
# loaded where the binaries run). Tooling only; nothing of it is committed or shipped.
#
#     bench/cuda_toolkit_from_wheels.sh DIR        (CUDA_WHEELS_VERSION, default 13.2.*)
set -euo pipefail
dir=${1:?usage: bench/cuda_toolkit_from_wheels.sh DIR}
version=${CUDA_WHEELS_VERSION:-13.2.*}
if [ -x "$dir/bin/nvcc" ] && [ -e "$dir/lib64/stubs/libcuda.so.1" ]; then
  echo "$dir: already assembled"
  exit 0
fi
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
for p in nvidia-cuda-nvcc nvidia-nvvm nvidia-cuda-crt nvidia-cuda-runtime nvidia-cuda-cccl; do
  python3 -m pip download -q --no-deps "$p==$version" -d "$work/wheels"
done
# cuBLAS has version numbers of its own: any 13.x links the same libcublas.so.13.
python3 -m pip download -q --no-deps "nvidia-cublas>=13,<14" -d "$work/wheels"
mkdir -p "$work/x"
for w in "$work"/wheels/*.whl; do
  python3 -m zipfile -e "$w" "$work/x"
done
src="$work/x/nvidia/cu13"
mkdir -p "$dir/bin" "$dir/include" "$dir/lib64/stubs" "$dir/nvvm/lib64"
cp -r "$src/bin/." "$dir/bin/"
cp -r "$src/include/." "$dir/include/"
# nvcc's own headers (crt/) are looked up beside the runtime's.
[ -d "$src/bin/crt" ] && cp -r "$src/bin/crt/." "$dir/include/crt/"
cp -r "$src/nvvm/bin" "$src/nvvm/libdevice" "$dir/nvvm/"
cp "$src"/lib/libnvvm.so* "$dir/nvvm/lib64/"
for f in "$src"/lib/*.so* "$src"/lib/*.a; do
  case "$(basename "$f")" in libnvvm.so*) ;; *) cp -P "$f" "$dir/lib64/" ;; esac
done
# Link names for the versioned libraries; nvcc.profile looks in lib/.
( cd "$dir/lib64"
  for f in *.so.*; do ln -sf "$f" "${f%%.so.*}.so"; done )
ln -sfn lib64 "$dir/lib"
# The wheels lose the executable bits.
chmod +x "$dir"/bin/* "$dir"/nvvm/bin/* 2>/dev/null || true
# Link-time stand-ins for the CUDA driver calls of ggml-cuda (its VMM pool); never run.
for f in cuInit cuDriverGetVersion cuDeviceGet cuDeviceGetAttribute cuGetErrorString \
  cuMemAddressFree cuMemAddressReserve cuMemCreate cuMemGetAllocationGranularity cuMemMap \
  cuMemRelease cuMemSetAccess cuMemUnmap; do
  echo "int $f(void) { return 0; }"
done >"$work/cuda_stub.c"
gcc -shared -fPIC -Wl,-soname,libcuda.so.1 "$work/cuda_stub.c" -o "$dir/lib64/stubs/libcuda.so"
# The name the linker looks for when it checks a library that needs libcuda.so.1 (-rpath-link).
ln -sf libcuda.so "$dir/lib64/stubs/libcuda.so.1"
"$dir/bin/nvcc" --version | tail -1
