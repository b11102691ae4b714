"""The GPU's device-to-device copy bandwidth, the ceiling issue 12 states its one-stream goals
against ("80 % of HBM bandwidth": the H200's ~4.3 TB/s copy, bytes read and written counted).

    python3 bench/copy_bandwidth.py [GIB]        (default 4 GiB copied, 20 timed copies)

Prints one line: the median of the timed copies in TB/s (read + write bytes over the time),
and the fastest. Tooling for the GPU machine only (PyTorch there); nothing here serves.
"""

import statistics
import sys

import torch

# Bytes a copy moves one way: large enough that launch cost is noise (a few µs against ms) and
# that the 50-60 MB L2 holds none of it.
GIB = float(sys.argv[1]) if len(sys.argv) > 1 else 4.0
# Timed copies after the warm-ups: the median of 20 settles within a percent on the H200.
TIMED = 20
WARMUPS = 3

n = int(GIB * (1 << 30))
src = torch.empty(n, dtype=torch.uint8, device="cuda")
dst = torch.empty_like(src)
src.fill_(1)
for _ in range(WARMUPS):
    dst.copy_(src)
torch.cuda.synchronize()
rates = []
for _ in range(TIMED):
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    start.record()
    dst.copy_(src)
    end.record()
    end.synchronize()
    seconds = start.elapsed_time(end) / 1e3
    rates.append(2 * n / seconds / 1e12)
print(
    f"device-to-device copy of {GIB:g} GiB ({torch.cuda.get_device_name()}): "
    f"median {statistics.median(rates):.3f} TB/s, best {max(rates):.3f} TB/s "
    f"(read + write bytes, {TIMED} copies)"
)
