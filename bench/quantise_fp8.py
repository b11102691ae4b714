#!/usr/bin/env python3
"""Writes a block-scaled FP8 twin of a bf16 benchmark model (`bench/make_model.py`'s output), as
Qwen's `-FP8` releases store their weights: every decoder projection (q/k/v/o, in_proj_qkvz,
out_proj, each expert's and the shared expert's gate/up/down, in `model.layers` and
`mtp.layers`) as e4m3 with one f32 scale per 128 × 128 block (`X.weight_scale_inv`, scale =
block amax / 448), everything else (embedding, lm_head, norms, router, in_proj_ba, the shared
expert's gate, conv1d) as it was, and `quantization_config` in config.json. Tensors are read one
and written one at a time (the safetensors header first, from the shapes), so a checkpoint
larger than memory converts.

    python3 bench/quantise_fp8.py /tmp/a3b /tmp/a3b-fp8

Nothing this writes is committed (benchmark models live outside the repository).
"""

import argparse
import json
import shutil
from pathlib import Path

import torch
from safetensors import safe_open

BLOCK = 128
E4M3_MAX = 448.0
# The projections Qwen's -FP8 checkpoints quantise (the last name part before `.weight`).
FP8_PROJECTIONS = {"q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj",
                   "in_proj_qkvz", "out_proj"}


def quantised(name: str, shape: list[int]) -> bool:
    parts = name.split(".")
    in_layers = name.startswith("model.layers.") or name.startswith("mtp.layers.")
    return (in_layers and len(shape) == 2 and parts[-1] == "weight" and parts[-2] in FP8_PROJECTIONS
            and shape[0] % BLOCK == 0 and shape[1] % BLOCK == 0)


def quantise(w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    out, inp = w.shape
    blocks = w.float().reshape(out // BLOCK, BLOCK, inp // BLOCK, BLOCK)
    scale = (blocks.abs().amax(dim=(1, 3)) / E4M3_MAX).clamp(min=1e-12)
    q = (blocks / scale[:, None, :, None]).reshape(out, inp).to(torch.float8_e4m3fn)
    return q.contiguous(), scale.float().contiguous()


DTYPE_NAMES = {torch.bfloat16: "BF16", torch.float16: "F16", torch.float32: "F32",
               torch.float8_e4m3fn: "F8_E4M3"}


def tensor_bytes(t: torch.Tensor) -> bytes:
    return t.contiguous().view(torch.uint8).numpy().tobytes()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("src", type=Path, help="bf16 model folder (config.json, *.safetensors)")
    ap.add_argument("out", type=Path, help="FP8 model folder to write")
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    files = [safe_open(f, "pt") for f in sorted(args.src.glob("*.safetensors"))]
    # Pass 1: every output tensor's name, dtype and shape, from the input's header.
    plan = {}  # output name -> (file, input name, part: "as is" | "q" | "scale", dtype, shape)
    for f in files:
        for name in f.keys():
            sl = f.get_slice(name)
            shape = list(sl.get_shape())
            if quantised(name, shape):
                plan[name] = (f, name, "q", "F8_E4M3", shape)
                plan[name + "_scale_inv"] = (f, name, "scale", "F32", [shape[0] // BLOCK, shape[1] // BLOCK])
            else:
                plan[name] = (f, name, "as is", sl.get_dtype(), shape)
    elem = {"F8_E4M3": 1, "BF16": 2, "F16": 2, "F32": 4}
    header, at = {"__metadata__": {"format": "pt"}}, 0
    for name in sorted(plan):
        _, _, _, dtype, shape = plan[name]
        n = elem[dtype]
        for d in shape:
            n *= d
        header[name] = {"dtype": dtype, "shape": shape, "data_offsets": [at, at + n]}
        at += n
    head = json.dumps(header, separators=(",", ":")).encode()
    head += b" " * (-len(head) % 8)
    # Pass 2: the data, one tensor at a time, in the header's order.
    n_fp8 = 0
    with open(args.out / "model.safetensors", "wb") as out:
        out.write(len(head).to_bytes(8, "little"))
        out.write(head)
        for name in sorted(plan):
            f, src, part, dtype, _ = plan[name]
            t = f.get_tensor(src)
            if part == "as is":
                out.write(tensor_bytes(t))
                continue
            q, scale = quantise(t)
            out.write(tensor_bytes(q if part == "q" else scale))
            n_fp8 += part == "q"
    config = json.loads((args.src / "config.json").read_text())
    config["quantization_config"] = {
        "activation_scheme": "dynamic", "fmt": "e4m3", "quant_method": "fp8",
        "weight_block_size": [BLOCK, BLOCK], "modules_to_not_convert": ["lm_head", "model.embed_tokens"],
    }
    (args.out / "config.json").write_text(json.dumps(config, indent=2, sort_keys=True) + "\n")
    for extra in ("tokenizer.json", "tokenizer_config.json", "generation_config.json"):
        if (args.src / extra).exists():
            shutil.copy(args.src / extra, args.out / extra)
    print(f"{args.out}: {n_fp8} projections in FP8, {len(plan)} tensors")


if __name__ == "__main__":
    main()
