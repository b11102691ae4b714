#!/usr/bin/env python3
"""Compiles flashlane's CUDA kernels for sm_90 off the GPU machine, as the CUDA backend does
(NVRTC to PTX), then assembles the PTX with ptxas to report each kernel's registers, spills and
shared memory. A compile error shows here in seconds instead of in a device call.

    pip install nvidia-cuda-nvrtc-cu12 nvidia-cuda-nvcc-cu12      (once)
    FLASHLANE_KERNEL_SOURCES=/tmp/ksrc cargo test -p backend-cuda --features cuda --lib \
        -- --ignored write_kernel_sources
    python3 tools/cuda_check/cuda_check.py /tmp/ksrc/*.cu [--kernel NAME_PART]

With --compare OLD_DIR (the sources of another revision, written the same way from a checkout
of it, e.g. a `git worktree`), it says for each kernel whether its PTX is the same as there, up
to the names of registers and labels: "same" proves a change left that kernel's code as it was
(so GPU runs of the old revision still speak for it); "differs" may be only a reordering.

Tooling only: nothing in the serving path runs Python."""
import argparse
import ctypes
import glob
import os
import re
import subprocess
import sys
import tempfile


def find(pattern):
    """The first file matching `pattern` under the Python installation's nvidia packages."""
    for base in sys.path:
        hits = sorted(glob.glob(os.path.join(base, "nvidia", pattern)))
        if hits:
            return hits[0]
    extra = os.environ.get("FLASHLANE_CUDA_WHEELS")
    if extra:
        hits = sorted(glob.glob(os.path.join(extra, "nvidia", pattern)))
        if hits:
            return hits[0]
    sys.exit(f"cuda_check: nvidia/{pattern} not found: pip install nvidia-cuda-nvrtc-cu12 "
             "nvidia-cuda-nvcc-cu12 (or point FLASHLANE_CUDA_WHEELS at where they are unpacked)")


# The architecture the backend compiles for; `--arch sm_90a` for the wgmma probe
# (`crates/backend-cuda/src/kernels/probe_tc.cu`).
ARCH = "sm_90"


def compile_ptx(nvrtc, source, name):
    prog = ctypes.c_void_p()
    rc = nvrtc.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), name.encode(), 0, None, None)
    if rc != 0:
        sys.exit(f"{name}: nvrtcCreateProgram failed ({rc})")
    # The options of the backend's compile: only the architecture.
    opts = [f"--gpu-architecture={ARCH}".encode()]
    arr = (ctypes.c_char_p * len(opts))(*opts)
    rc = nvrtc.nvrtcCompileProgram(prog, len(opts), arr)
    size = ctypes.c_size_t()
    nvrtc.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
    log = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetProgramLog(prog, log)
    if rc != 0:
        print(log.value.decode(errors="replace"))
        sys.exit(f"{name}: NVRTC failed ({rc})")
    nvrtc.nvrtcGetPTXSize(prog, ctypes.byref(size))
    ptx = ctypes.create_string_buffer(size.value)
    nvrtc.nvrtcGetPTX(prog, ptx)
    return ptx.value.decode()


def kernels_of(ptx):
    """Each entry function's PTX text, by name: from its `.entry` to the next one (not to the
    first line "}": an inline-asm block's closing brace, as the wgmma kernels' are, stands at the
    start of a line too, and cut those kernels short)."""
    starts = [(m.start(), m.group(1)) for m in re.finditer(r"\.visible \.entry (\w+)\(", ptx)]
    ends = [pos for pos, _ in starts[1:]] + [len(ptx)]
    # Through the last "}" before the next entry (not the next entry's `.globl` comment).
    return {name: ptx[pos:ptx.rindex("\n}", pos, end) + 2] for (pos, name), end in zip(starts, ends)}


def normalised(text):
    """PTX with registers, labels and local-memory depots (numbered by the kernel's place in the
    module) renamed in order of first appearance."""
    names = {}

    def rename(m):
        token = m.group(0)
        kind = re.match(r"(%[a-z]+|\$L__BB|__local_depot)", token).group(1)
        seen = names.setdefault(kind, {})
        return seen.setdefault(token, f"{kind}#{len(seen)}")

    return re.sub(r"%(?:rd|rs|r|fd|f|p|hh|h)\d+|\$L__BB\d+_\d+|__local_depot\d+", rename, text)


def compare(nvrtc, path, old_dir):
    """Prints, per kernel of `path`, whether the same-named source in old_dir compiles to it."""
    name = os.path.basename(path)
    old_path = os.path.join(old_dir, name)
    if not os.path.exists(old_path):
        print(f"== {name}: no {old_path}")
        return
    new = kernels_of(compile_ptx(nvrtc, open(path).read(), name))
    old = kernels_of(compile_ptx(nvrtc, open(old_path).read(), name))
    print(f"== {name} against {old_path}")
    for kernel in sorted(set(new) | set(old)):
        if kernel not in old:
            verdict = "new"
        elif kernel not in new:
            verdict = "gone"
        else:
            verdict = "same" if normalised(new[kernel]) == normalised(old[kernel]) else "differs"
        print(f"  {kernel:28} {verdict}")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("sources", nargs="+", help="kernel sources written by write_kernel_sources")
    ap.add_argument("--kernel", default="", help="report only kernels whose name contains this")
    ap.add_argument("--arch", default="sm_90", help="the architecture (sm_90a for the wgmma probe)")
    ap.add_argument("--compare", metavar="OLD_DIR",
                    help="compare each kernel's PTX with the same-named source in OLD_DIR instead")
    args = ap.parse_args()
    globals()["ARCH"] = args.arch
    lib = find("cuda_nvrtc/lib/libnvrtc.so.*[0-9]")
    nvrtc = ctypes.CDLL(lib)
    if args.compare:
        for path in args.sources:
            compare(nvrtc, path, args.compare)
        return
    ptxas = find("cuda_nvcc/bin/ptxas")
    for path in args.sources:
        name = os.path.basename(path)
        ptx = compile_ptx(nvrtc, open(path).read(), name)
        with tempfile.TemporaryDirectory() as tmp:
            ptx_path = os.path.join(tmp, "k.ptx")
            open(ptx_path, "w").write(ptx)
            run = subprocess.run([ptxas, f"-arch={ARCH}", "-v", ptx_path, "-o", os.path.join(tmp, "k.cubin")],
                                 capture_output=True, text=True)
        if run.returncode != 0:
            print(run.stderr)
            sys.exit(f"{name}: ptxas failed")
        # ptxas -v: "Compiling entry function 'X'" then its "Used N registers, ... smem" lines.
        kernel = None
        print(f"== {name}")
        for line in run.stderr.splitlines():
            m = re.search(r"Compiling entry function '(\w+)'", line)
            if m:
                kernel = m.group(1)
                continue
            if kernel and args.kernel in kernel and ("Used" in line or "spill" in line):
                print(f"  {kernel:28} {line.split('info    :')[-1].strip()}")
            elif "warning" in line.lower():
                # ptxas's advisories (a wgmma serialised, a stack in use …) name their kernel.
                print(f"  {line.strip()}")


if __name__ == "__main__":
    main()
