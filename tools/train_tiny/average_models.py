#!/usr/bin/env python3
"""Averages the trunks of several checkpoints of one architecture (a "model soup"): every tensor
but the MTP head's is the weighted mean, in f32, of the same tensor in each input, rounded back to
the first input's dtype (to nearest, ties to even); the `mtp.*` tensors are the first input's as
they are (a head is trained for one trunk: train it again with train_mtp_chain.py on the averaged
one), so the other inputs may be trunks without a head (as device scripts bring them back).

    average_models.py OUT_DIR DIR_A DIR_B [DIR_C ...] [--weights 0.5,0.5]

`--weights 0,1` puts DIR_B's trunk under DIR_A's head and files: a trunk a device call brought
back, made a model directory to evaluate. Each DIR holds model.safetensors.

Stages fine-tuned from the same parent lie close together in weight space, where the mean of two
often generalises better than either (Wortsman et al., 2022). OUT_DIR gets model.safetensors and
the first input's config, tokenizer and generation files.

Needs numpy only (no torch: the 2-core machines that evaluate the means on the CPU have none):
the safetensors files are read and written here, bf16 as its 16-bit patterns widened to f32."""
import argparse
import json
import math
import os
import shutil
import struct

COPIED = ["config.json", "tokenizer.json", "tokenizer_config.json", "generation_config.json"]
# The floating-point dtypes averaged; any other tensor is the first input's, as it is.
FLOAT_DTYPES = {"BF16", "F32"}


def load(path):
    """{name: (dtype, shape, raw bytes)} and the header's metadata of a safetensors file."""
    with open(path, "rb") as f:
        blob = f.read()
    (n,) = struct.unpack("<Q", blob[:8])
    header = json.loads(blob[8:8 + n])
    metadata = header.pop("__metadata__", None)
    base = 8 + n
    tensors = {k: (v["dtype"], v["shape"], blob[base + v["data_offsets"][0]:base + v["data_offsets"][1]])
               for k, v in header.items()}
    return tensors, metadata


def save(path, tensors, metadata):
    """Writes `tensors` ({name: (dtype, shape, raw bytes)}) as safetensors, names in order."""
    header, offset = {}, 0
    for k in sorted(tensors):
        dtype, shape, data = tensors[k]
        header[k] = {"dtype": dtype, "shape": shape, "data_offsets": [offset, offset + len(data)]}
        offset += len(data)
    if metadata:
        header["__metadata__"] = metadata
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * (-len(text) % 8)  # the data starts 8-byte aligned
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for k in sorted(tensors):
            f.write(tensors[k][2])


def load_model_dir(src_dir):
    """A model directory's tensors ({name: (dtype, shape, bytes)}), metadata and config (dict)."""
    with open(os.path.join(src_dir, "config.json")) as f:
        config = json.load(f)
    tensors, metadata = load(os.path.join(src_dir, "model.safetensors"))
    return tensors, metadata, config


def save_model_dir(src_dir, out_dir, tensors, metadata, config):
    """Writes a model directory made from SRC_DIR's: `tensors` as model.safetensors, `config` as
    config.json and SRC_DIR's tokenizer and generation files as they are; returns the weights'
    bytes."""
    os.makedirs(out_dir, exist_ok=True)
    save(os.path.join(out_dir, "model.safetensors"), tensors, metadata or {"format": "pt"})
    for f in COPIED:
        src = os.path.join(src_dir, f)
        if os.path.exists(src) and f != "config.json":
            shutil.copy(src, os.path.join(out_dir, f))
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
        f.write("\n")
    return os.path.getsize(os.path.join(out_dir, "model.safetensors"))


def to_f32(dtype, data):
    import numpy as np  # here, so that load and save need no numpy (grow_depth.py, its test)

    if dtype == "F32":
        return np.frombuffer(data, np.float32)
    return (np.frombuffer(data, np.uint16).astype(np.uint32) << 16).view(np.float32)


def from_f32(dtype, values):
    import numpy as np

    if dtype == "F32":
        return values.astype(np.float32).tobytes()
    bits = values.astype(np.float32).view(np.uint32)
    if np.isnan(values).any():
        raise SystemExit("a mean is NaN: an input holds a NaN")
    # To nearest bf16, ties to even: add 0x7fff plus the kept part's lowest bit, then truncate.
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16).tobytes()


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
    import numpy as np

    loaded = [load(os.path.join(d, "model.safetensors")) for d in args.inputs]
    models = [m for m, _ in loaded]

    def trunk(m):
        return {k for k in m if not k.startswith("mtp.")}

    for d, m in zip(args.inputs[1:], models[1:]):
        if trunk(m) != trunk(models[0]):
            raise SystemExit(f"{d}: trunk tensor names differ from {args.inputs[0]}'s: "
                             f"{sorted(trunk(m) ^ trunk(models[0]))[:5]}")
    out = {}
    for k, (dtype, shape, data) in models[0].items():
        if k.startswith("mtp.") or dtype not in FLOAT_DTYPES:
            out[k] = (dtype, shape, data)
            continue
        for d, m in zip(args.inputs[1:], models[1:]):
            if m[k][:2] != (dtype, shape):
                raise SystemExit(f"{d}: tensor {k} is {m[k][0]} {m[k][1]}, "
                                 f"{args.inputs[0]} has {dtype} {shape}")
        # In f32, input by input, each weight rounded to f32 first.
        mean = np.zeros(len(data) // (4 if dtype == "F32" else 2), np.float32)
        for w, m in zip(weights, models):
            mean += np.float32(w) * to_f32(dtype, m[k][2])
        out[k] = (dtype, shape, from_f32(dtype, mean))
    os.makedirs(args.out, exist_ok=True)
    save(os.path.join(args.out, "model.safetensors"), out, loaded[0][1] or {"format": "pt"})
    for f in COPIED:
        src = os.path.join(args.inputs[0], f)
        if os.path.exists(src):
            shutil.copy(src, os.path.join(args.out, f))
    print(f"averaged {len(out)} tensors of {len(models)} models, weights {weights} -> {args.out}")


if __name__ == "__main__":
    main()
