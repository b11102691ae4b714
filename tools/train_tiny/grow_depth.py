#!/usr/bin/env python3
"""Grows a model by one layer that starts as the identity (depth up-scaling), so that training can
go on from a larger model that at first computes exactly what the smaller one did: layer COPY's
tensors are copied to a new layer inserted at AT (the layers from AT on move up by one), and its
residual outputs (the mixer's `out_proj` or `o_proj`, every expert's and the shared expert's
`down_proj`, a dense MLP's `down_proj`) are zeroed, so that it adds nothing to the residual stream
until training moves them. The config's `num_hidden_layers`, `layer_types` and `mlp_only_layers`
follow; the embeddings, the final norm and the MTP head (`mtp.*`, which reads the trunk's last
hidden state) are kept as they are.

    grow_depth.py SRC_DIR OUT_DIR --copy L [--at P]      (P defaults to L + 1)

Why: the default model's counting plateaued at 93.8 % after four fine-tuning stages of the same
size (bench/RESULTS.md sessions 51-55) and issue 18 allows up to 50 MB (43 MB now; a linear
layer adds 3.8 MB). `train.py --init OUT_DIR` continues from the grown model (its config is read
from there).

Needs no numpy or torch: names, the config and bytes only."""
import argparse
import os
import re

from average_models import load_model_dir, save_model_dir

LAYER = re.compile(r"^model\.layers\.(\d+)\.(.+)$")
# A layer's tensors whose outputs are added to the residual stream: zeroed in the new layer.
RESIDUAL_OUTPUTS = re.compile(
    r"^(linear_attn\.out_proj|self_attn\.o_proj|mlp\.experts\.\d+\.down_proj|"
    r"mlp\.shared_expert\.down_proj|mlp\.down_proj)\.weight$")


def grow(tensors, config, copy, at):
    """The tensors ({name: (dtype, shape, bytes)}) and config (dict) with layer `copy` inserted at
    `at` as the identity. Raises ValueError for a layer that does not exist."""
    layers = config["num_hidden_layers"]
    if not 0 <= copy < layers:
        raise ValueError(f"--copy {copy}: the model has layers 0..{layers - 1}")
    if not 0 <= at <= layers:
        raise ValueError(f"--at {at}: a new layer goes at 0..{layers}")
    out, zeroed = {}, []
    for name, tensor in tensors.items():
        m = LAYER.match(name)
        if not m:
            out[name] = tensor
            continue
        i, rest = int(m.group(1)), m.group(2)
        out[f"model.layers.{i + 1 if i >= at else i}.{rest}"] = tensor
        if i == copy:
            dtype, shape, data = tensor
            if RESIDUAL_OUTPUTS.match(rest):
                data = bytes(len(data))
                zeroed.append(rest)
            out[f"model.layers.{at}.{rest}"] = (dtype, shape, data)
    if not any(n.startswith("linear_attn.out_proj") or n.startswith("self_attn.o_proj") for n in zeroed):
        raise ValueError(f"layer {copy} has no mixer output projection to zero: not a Qwen3(-Next) layer")
    grown = dict(config)
    grown["num_hidden_layers"] = layers + 1
    if "layer_types" in config:
        types = list(config["layer_types"])
        types.insert(at, config["layer_types"][copy])
        grown["layer_types"] = types
    if config.get("mlp_only_layers"):
        only = [i + 1 if i >= at else i for i in config["mlp_only_layers"]]
        if copy in config["mlp_only_layers"]:
            only.append(at)
        grown["mlp_only_layers"] = sorted(only)
    if config.get("decoder_sparse_step", 1) != 1:
        raise ValueError("decoder_sparse_step other than 1 places the MoE layers by index: not handled")
    return out, grown, sorted(zeroed)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--copy", type=int, required=True, help="the layer whose weights the new one starts from")
    ap.add_argument("--at", type=int, help="where the new layer goes (default: right after --copy)")
    args = ap.parse_args()
    if os.path.realpath(args.out) == os.path.realpath(args.src):
        ap.error(f"OUT {args.out} is SRC: write the grown model elsewhere")
    tensors, metadata, config = load_model_dir(args.src)
    at = args.copy + 1 if args.at is None else args.at
    try:
        out, grown, zeroed = grow(tensors, config, args.copy, at)
    except ValueError as e:
        raise SystemExit(f"grow_depth: {args.src}: {e}")
    size = save_model_dir(args.src, args.out, out, metadata, grown)
    print(f"layer {args.copy} copied to {at} ({len(zeroed)} residual outputs zeroed): "
          f"{grown['num_hidden_layers']} layers, {size / 1e6:.1f} MB -> {args.out}")


if __name__ == "__main__":
    main()
