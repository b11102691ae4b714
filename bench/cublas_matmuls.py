"""What a decode round's matmuls take under cuBLAS, which keeps no batch invariance: the
reference issue 12 asks the guarantee's cost to be measured against ("the cost of that
guarantee measured against a build without it").

    python3 bench/cublas_matmuls.py bench/shapes/qwen3-4b [SHAPE_DIR...] [--rows 1,8,32,64] [--kernels]

For each dense shape (a config.json of a `qwen3` model), every layer's four projections (q/k/v
joined, o, gate/up joined, down) hold their own random bf16 weights, as many layers as the
shape has, so that a pass reads the model's weight bytes from HBM as a decode round does (the
L2 holds a few layers' at most); the LM head once. One pass, `rows` rows of bf16 activations
through every projection (`torch.mm`, bf16 out: cuBLAS picks its kernel, split and order by
the shape, so a row's bits depend on the batch), is captured in a CUDA graph and replayed;
the median of the timed replays is printed with the weight bytes over that time, and each
kind's own pass beside it. flashlane's kernels for the same round come from its kernel
timeline (`FLASHLANE_TIMELINE=1 flashlane bench …`, bench/device_ab.sh `timeline`) in the
same call. With `--kernels`, each row count's table is followed by the kernels cuBLAS launches
for one layer's projections (PyTorch's profiler: name, grid, block, registers, shared memory
and µs, as the profiler's trace records them), so that what it does at 64 rows (its tiles, its
split of k) can be read beside flashlane's kernels.

What this leaves out, so it is a floor for a non-invariant engine rather than one: the norms,
RoPE, attention, the SwiGLU and the residual adds between the projections. x is bf16 here,
where flashlane's default multiplies f32 activations as two bf16 products (`--matmul-input
bf16` is one, as here). Tooling for the GPU machine only (PyTorch there); nothing here serves.
"""

import argparse
import json
import statistics
from pathlib import Path

import torch

# Timed replays after the warm-ups: a pass of Qwen3-4B's weights takes milliseconds, and the
# median of 20 settles within a percent (as the copy's does, bench/copy_bandwidth.py).
TIMED = 20
WARMUPS = 3


def projections(config: dict) -> dict[str, tuple[int, int]]:
    """(outputs, inputs) of each of a dense Qwen3 layer's four projections."""
    hidden = config["hidden_size"]
    head_dim = config.get("head_dim") or hidden // config["num_attention_heads"]
    q = config["num_attention_heads"] * head_dim
    kv = config["num_key_value_heads"] * head_dim
    inter = config["intermediate_size"]
    return {
        "q/k/v": (q + 2 * kv, hidden),
        "o": (hidden, q),
        "gate/up": (2 * inter, hidden),
        "down": (hidden, inter),
    }


def timed(run) -> float:
    """The median µs of one replay of `run` captured in a CUDA graph."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(WARMUPS):
            run()
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        run()
    for _ in range(WARMUPS):
        graph.replay()
    torch.cuda.synchronize()
    times = []
    for _ in range(TIMED):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        graph.replay()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end) * 1e3)
    return statistics.median(times)


def kernel_lines(prof_path: Path) -> list[str]:
    """Each kernel event of a Chrome trace PyTorch wrote: name, grid, block, registers, shared
    memory and duration."""
    trace = json.loads(prof_path.read_text())
    lines = []
    for event in trace.get("traceEvents", []):
        if event.get("cat") != "kernel":
            continue
        args = event.get("args", {})
        shape = "  ".join(
            f"{key} {args[key]}"
            for key in ("grid", "block", "registers per thread", "shared memory", "blocks per SM")
            if key in args
        )
        lines.append(f"    {event['name'][:110]}  {event.get('dur', 0):.1f} µs  {shape}")
    return lines


def traced_kernels(run, out: Path) -> list[str]:
    """The kernels `run` launches, from a Chrome trace of PyTorch's profiler written to `out`."""
    from torch.profiler import ProfilerActivity, profile

    run()
    torch.cuda.synchronize()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        run()
        torch.cuda.synchronize()
    prof.export_chrome_trace(str(out))
    return kernel_lines(out)


def shape_table(shape_dir: Path, rows_list: list[int], kernels: bool = False) -> list[str]:
    config = json.loads((shape_dir / "config.json").read_text())
    layers = config["num_hidden_layers"]
    kinds = projections(config)
    gen = torch.Generator(device="cuda").manual_seed(0)

    def weights(n: int, k: int) -> torch.Tensor:
        return (torch.randn(n, k, device="cuda", generator=gen) * 0.02).to(torch.bfloat16)

    per_layer = [{name: weights(n, k) for name, (n, k) in kinds.items()} for _ in range(layers)]
    head = weights(config["vocab_size"], config["hidden_size"])
    layer_bytes = sum(2 * n * k for n, k in kinds.values())
    head_bytes = 2 * head.numel()
    lines = [
        f"### {shape_dir.name} ({torch.cuda.get_device_name()}, torch {torch.__version__}): "
        f"{layers} layers of {layer_bytes / 1e6:.1f} MB, LM head {head_bytes / 1e6:.1f} MB",
        "",
        "| rows | layers' projections µs (TB/s) | "
        + " | ".join(f"{name} µs" for name in kinds)
        + " | LM head µs | all µs (TB/s) |",
        "|---" * (len(kinds) + 4) + "|",
    ]
    kernel_notes: list[str] = []
    for rows in rows_list:
        xs = {k: torch.randn(rows, k, device="cuda", generator=gen).to(torch.bfloat16) for _, k in kinds.values()}
        ys = {name: torch.empty(rows, n, device="cuda", dtype=torch.bfloat16) for name, (n, _) in kinds.items()}
        y_head = torch.empty(rows, head.shape[0], device="cuda", dtype=torch.bfloat16)

        def layer_pass(only: str | None = None) -> None:
            for layer in per_layer:
                for name, (_, k) in kinds.items():
                    if only is None or only == name:
                        torch.mm(xs[k], layer[name].t(), out=ys[name])

        def head_pass() -> None:
            torch.mm(xs[config["hidden_size"]], head.t(), out=y_head)

        def whole() -> None:
            layer_pass()
            head_pass()

        layers_us = timed(layer_pass)
        by_kind = [timed(lambda name=name: layer_pass(name)) for name in kinds]
        head_us = timed(head_pass)
        all_us = timed(whole)
        lines.append(
            f"| {rows} | {layers_us:,.0f} ({layers * layer_bytes / layers_us / 1e6:.2f}) | "
            + " | ".join(f"{us:,.0f}" for us in by_kind)
            + f" | {head_us:,.0f} | {all_us:,.0f} ({(layers * layer_bytes + head_bytes) / all_us / 1e6:.2f}) |"
        )
        if kernels:
            def first_layer() -> None:
                for name, (_, k) in kinds.items():
                    torch.mm(xs[k], per_layer[0][name].t(), out=ys[name])
                head_pass()

            kernel_notes.append(f"{rows} rows, layer 0's q/k/v, o, gate/up, down, then the LM head:")
            kernel_notes += traced_kernels(first_layer, Path(f"/tmp/cublas_{shape_dir.name}_{rows}.json"))
        del xs, ys, y_head
    del per_layer, head
    torch.cuda.empty_cache()
    return lines + ([""] + kernel_notes if kernel_notes else [])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("shapes", nargs="+", type=Path, help="folders holding a dense Qwen3 config.json")
    ap.add_argument("--rows", default="1,8,32,64", type=lambda s: [int(x) for x in s.split(",")])
    ap.add_argument("--kernels", action="store_true", help="list the kernels cuBLAS launches for each row count")
    args = ap.parse_args()
    for shape in args.shapes:
        print("\n".join(shape_table(shape, args.rows, args.kernels)))
        print()


if __name__ == "__main__":
    main()
