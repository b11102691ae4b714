#!/usr/bin/env python3
"""Averages the trunks of several checkpoints of one architecture (a "model soup"): every tensor
but the MTP head's is the weighted mean, in f32, of the same tensor in each input, rounded back to
the first input's dtype; the `mtp.*` tensors are the first input's as they are (a head is trained
for one trunk: train it again with train_mtp_chain.py on the averaged one), so the other inputs
may be trunks without a head (as device scripts bring them back).

    average_models.py OUT_DIR DIR_A DIR_B [DIR_C ...] [--weights 0.5,0.5]

Stages fine-tuned from the same parent lie close together in weight space, where the mean of two
often generalises better than either (Wortsman et al., 2022). OUT_DIR gets model.safetensors and
the first input's config, tokenizer and generation files."""
import argparse
import math
import os
import shutil

import torch
from safetensors.torch import load_file, save_file

COPIED = ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("out")
    ap.add_argument("inputs", nargs="+", help="model directories (the first gives the MTP head and files)")
    ap.add_argument("--weights", help="comma-separated, one per input (default: equal)")
    args = ap.parse_args()
    if len(args.inputs) < 2:
        ap.error("give at least two model directories")
    weights = [float(w) for w in args.weights.split(",")] if args.weights else [1.0] * len(args.inputs)
    if (len(weights) != len(args.inputs) or not all(math.isfinite(w) and w >= 0 for w in weights)
            or sum(weights) == 0):
        ap.error(f"--weights needs {len(args.inputs)} finite non-negative numbers, not all zero")
    if any(os.path.realpath(args.out) == os.path.realpath(d) for d in args.inputs):
        ap.error(f"OUT {args.out} is one of the inputs: write the mean elsewhere")
    weights = [w / sum(weights) for w in weights]
    models = [load_file(os.path.join(d, "model.safetensors")) for d in args.inputs]

    def trunk(m):
        return {k for k in m if not k.startswith("mtp.")}

    keys = set(models[0])
    for d, m in zip(args.inputs[1:], models[1:]):
        if trunk(m) != trunk(models[0]):
            raise SystemExit(f"{d}: trunk tensor names differ from {args.inputs[0]}'s: "
                             f"{sorted(trunk(m) ^ trunk(models[0]))[:5]}")
    out = {}
    for k in sorted(keys):
        first = models[0][k]
        if k.startswith("mtp.") or not first.is_floating_point():
            out[k] = first.clone()
            continue
        for d, m in zip(args.inputs[1:], models[1:]):
            if m[k].shape != first.shape or m[k].dtype != first.dtype:
                raise SystemExit(f"{d}: tensor {k} is {m[k].dtype} {tuple(m[k].shape)}, "
                                 f"{args.inputs[0]} has {first.dtype} {tuple(first.shape)}")
        mean = sum(w * m[k].float() for w, m in zip(weights, models))
        out[k] = mean.to(first.dtype).contiguous()
    os.makedirs(args.out, exist_ok=True)
    save_file(out, os.path.join(args.out, "model.safetensors"), metadata={"format": "pt"})
    for f in COPIED:
        src = os.path.join(args.inputs[0], f)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, f))
    print(f"averaged {len(out)} tensors of {len(models)} models, weights {weights} -> {args.out}")


if __name__ == "__main__":
    main()
