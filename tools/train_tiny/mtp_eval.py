"""MTP top-1 acceptance of a flashlane-tiny checkpoint on the CPU, from the saved file alone.

    python tools/train_tiny/mtp_eval.py models/flashlane-tiny [code files...]

Counting text: seeded random chat counts. Code: the files given (default: this folder's own
sources, which no training run has seen). For each position i the MTP head (fed h_i and the true
x_{i+1}) predicts x_{i+2}; we report its top-1 agreement with the text and with the trunk's greedy
token at i+1 (what greedy verification of a one-token draft accepts)."""

import glob
import json
import os
import random
import sys

import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import data  # noqa: E402
import train  # noqa: E402


def main():
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers import Qwen3NextForCausalLM

    d = sys.argv[1]
    files = sys.argv[2:] or sorted(glob.glob(os.path.join(HERE, "*.py")))
    tok = Tokenizer.from_file(os.path.join(d, "tokenizer.json"))
    model = Qwen3NextForCausalLM.from_pretrained(d, dtype=torch.float32).eval()
    sd = load_file(os.path.join(d, "model.safetensors"))
    mtp = train.MTP(model.config).eval()
    mtp.load_state_dict({k: v.float() for k, v in train.fuse({k[4:]: v for k, v in sd.items()
                                                              if k.startswith("mtp.")}).items()}, strict=True)
    rng = random.Random(4242)
    counts = []
    for _ in range(4):
        a = rng.randint(0, 3000)
        b = a + rng.randint(100, 400)
        counts.append(np.array(tok.encode(data.chat(f"Count from {a} to {b}.", data.count_reply(a, b, 1))).ids))
    code = [np.array(tok.encode(open(f).read()).ids[:2048]) for f in files]
    res = {"counting": train.mtp_acceptance(model, mtp, counts, torch.device("cpu")),
           "code": train.mtp_acceptance(model, mtp, code, torch.device("cpu")),
           "code_files": [os.path.relpath(f) for f in files]}
    print(json.dumps(res, indent=1))


if __name__ == "__main__":
    main()
