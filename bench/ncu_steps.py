"""Where a decode step's time goes, from an ncu CSV of `flashlane bench` (one metric:
gpu__time_duration.sum, graphs off so that every kernel is its own launch):

    FLASHLANE_CUDA_GRAPHS=0 ncu --clock-control none --cache-control none \
        --metrics gpu__time_duration.sum --csv flashlane bench --device cuda --model DIR \
        --load-format dummy --streams 1 --prompt-tokens 16 --new-tokens 6 > run.csv
    python3 bench/ncu_steps.py run.csv

A step starts at each `embed_rows` launch. The steps that look like decode steps (the most
common kernel count, after the first two, but for any far longer than the others: a prompt of
many streams) are averaged (give --new-tokens enough for several): per kernel name and grid, launches a
step, mean µs a launch and µs a step, largest first.

    python3 bench/ncu_steps.py --prompt run.csv

summarises the longest step instead: a prompt's (run with --streams 1 --prompt-tokens 128 for
where one 128-token prompt goes).

Where the CSV holds more of HEALTH_METRICS (ncu `--metrics` with them beside the duration:
bench/gpu_profile.sh with HEALTH=1), each row also gives the kernel's DRAM throughput and
achieved occupancy (% of peak), its shared loads' wavefronts a request (1 where 32-bit loads
meet no bank conflict) and bank conflicts a launch, and its local-memory sectors a launch
(register spills): what to look at first in a kernel that reads below the HBM's rate.
"""

import csv
import statistics
import sys
from collections import Counter, defaultdict

STEP_START = "embed_rows"
# A step of the common kernel count that takes more than this many times the median of such
# steps is a prompt's, not a decode step.
PROMPT_STEP_FACTOR = 1.5
# Microseconds in one of each unit ncu writes a duration in (it picks the unit per row unless
# told `--print-units base`).
MICROSECONDS = {"ns": 1e-3, "nsecond": 1e-3, "us": 1.0, "usecond": 1.0, "ms": 1e3, "msecond": 1e3}
DURATION = "gpu__time_duration.sum"
# (metric, column label) of a kernel's health, each averaged over its launches in the steps.
HEALTH_METRICS = [
    ("dram__throughput.avg.pct_of_peak_sustained_elapsed", "dram%"),
    ("sm__warps_active.avg.pct_of_peak_sustained_active", "occ%"),
    ("l1tex__data_pipe_lsu_wavefronts_mem_shared_op_ld.sum", "shld_wf"),
    # Shared loads executed (warp instructions): the H100's ncu gave "n/a" for the l1tex request
    # count of the shared pipe (session 48), so wavefronts are counted a load instruction.
    ("smsp__sass_inst_executed_op_shared_ld.sum", "shld_inst"),
    ("l1tex__data_bank_conflicts_pipe_lsu_mem_shared.sum", "conflicts"),
    ("l1tex__t_sectors_pipe_lsu_mem_local_op_ld.sum", "local_ld"),
    ("l1tex__t_sectors_pipe_lsu_mem_local_op_st.sum", "local_st"),
]


def launches(path):
    """(kernel name, grid, µs, {health metric: value}) of every launch, in order."""
    with open(path, newline="") as f:
        lines = f.readlines()
    header = next(i for i, line in enumerate(lines) if line.startswith('"ID"'))
    rows = csv.DictReader(lines[header:])
    out, by_id = [], {}
    health = dict(HEALTH_METRICS)
    for r in rows:
        metric = r.get("Metric Name")
        if metric in health:
            # A launch's rows share its ID; the duration row may come before or after.
            try:
                value = float(r["Metric Value"].replace(",", ""))
            except ValueError:  # "n/a" where ncu could not collect it
                value = float("nan")
            by_id.setdefault(r["ID"], {})[metric] = value
            continue
        if metric != DURATION:
            continue
        value = float(r["Metric Value"].replace(",", ""))
        unit = r.get("Metric Unit", "")
        if unit not in MICROSECONDS:
            raise SystemExit(f"{path}: a duration in unknown units {unit!r}")
        us = value * MICROSECONDS[unit]
        name = r["Kernel Name"].split("(")[0].strip()
        out.append((name, r.get("Grid Size", ""), us, by_id.setdefault(r["ID"], {})))
    return out


def health_of(metric_dicts):
    """The health columns of a kernel's launches (empty where the CSV has none)."""
    if not any(metric_dicts):
        return ""

    def mean(metric):
        values = [m[metric] for m in metric_dicts if metric in m]
        return statistics.mean(values) if values else float("nan")

    wavefronts, loads = mean(HEALTH_METRICS[2][0]), mean(HEALTH_METRICS[3][0])
    per_load = wavefronts / loads if loads else float("nan")
    return (f" dram={mean(HEALTH_METRICS[0][0]):5.1f}% occ={mean(HEALTH_METRICS[1][0]):5.1f}%"
            f" shared wf/load={per_load:5.2f} conflicts={mean(HEALTH_METRICS[4][0]):9.0f}"
            f" local ld/st sectors={mean(HEALTH_METRICS[5][0]):7.0f}/{mean(HEALTH_METRICS[6][0]):7.0f}")


def steps(runs):
    """Launches cut at each STEP_START."""
    cut, current = [], []
    for launch in runs:
        if launch[0] == STEP_START and current:
            cut.append(current)
            current = []
        current.append(launch)
    if current:
        cut.append(current)
    return cut


def table_of(cut):
    """Per (kernel, grid) over the steps `cut`: (µs a step, name, grid, launches a step, µs a
    launch), largest first."""
    per = defaultdict(list)
    for s in cut:
        for name, grid, us, metrics in s:
            per[(name, grid)].append((us, metrics))
    rows = []
    for (name, grid), runs in per.items():
        times = [us for us, _ in runs]
        rows.append((sum(times) / len(cut), name, grid, len(times) / len(cut), statistics.mean(times),
                     health_of([m for _, m in runs])))
    for step_us, name, grid, n, mean, health in sorted(rows, reverse=True):
        print(f"  {name:<24} {grid:<14} n/step={n:5.1f} avg={mean:8.2f}µs per-step={step_us:8.1f}µs{health}")


def prompt(path):
    cut = steps(launches(path))
    if not cut:
        print(f"== {path}: no steps")
        return
    longest = max(range(len(cut)), key=lambda i: sum(u for _, _, u, _ in cut[i]))
    s = cut[longest]
    print(f"== {path}: the longest of {len(cut)} steps, step {longest}: "
          f"{sum(u for _, _, u, _ in s):.1f} µs, {len(s)} kernels")
    table_of([s])


def main(path):
    cut = steps(launches(path))
    sizes = [(len(s), round(sum(u for _, _, u, _ in s))) for s in cut]
    print(f"== {path}: {len(cut)} steps (kernels, µs): {sizes}")
    common = Counter(len(s) for s in cut[2:]).most_common(1)
    if not common:
        print("no decode steps")
        return
    decode = [s for s in cut[2:] if len(s) == common[0][0]]
    # A prompt's step of many streams makes the same launches as their decode steps (64 streams
    # of 16 tokens: 40 ms against 6 ms): steps far longer than the group's median are left out.
    median = statistics.median(sum(u for _, _, u, _ in s) for s in decode)
    long = [s for s in decode if sum(u for _, _, u, _ in s) > PROMPT_STEP_FACTOR * median]
    decode = [s for s in decode if s not in long]
    if long:
        print(f"left out as prompt steps: {[round(sum(u for _, _, u, _ in s)) for s in long]} µs")
    total = statistics.mean(sum(u for _, _, u, _ in s) for s in decode)
    print(f"per decode step: {total:.1f} µs, {common[0][0]} kernels, {len(decode)} steps averaged")
    table_of(decode)


if __name__ == "__main__":
    args = sys.argv[1:]
    summarise = prompt if args[:1] == ["--prompt"] else main
    for p in args[1:] if summarise is prompt else args:
        summarise(p)
