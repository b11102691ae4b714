"""Checks `train.py --experts dense` against transformers' loop over experts on a random MoE block
(CPU, f32): the outputs, the input's gradient and every parameter's gradient. Exits non-zero when
they differ by more than float rounding.

    python tools/train_tiny/check_dense_experts.py
"""

import copy
import os
import sys

import torch
from transformers import Qwen3NextConfig
from transformers.models.qwen3_next import modeling_qwen3_next as qn

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import train  # noqa: E402

# Sums of two routed experts in another order: a few units of f32 rounding at these magnitudes
# (outputs up to ~15, gradients up to ~50).
TOLERANCE = 1e-4


def run(block, x, forward):
    qn.Qwen3NextExperts.forward = forward
    b = copy.deepcopy(block)
    xx = x.detach().clone().requires_grad_(True)
    y = b(xx)
    # A loss that weighs every output differently, so each gradient is exercised.
    (y * torch.linspace(-1, 1, y.numel()).reshape(y.shape)).sum().backward()
    return y.detach(), xx.grad, {n: p.grad for n, p in b.named_parameters()}


def main():
    torch.manual_seed(0)
    cfg = Qwen3NextConfig(hidden_size=64, moe_intermediate_size=32, num_experts=8, num_experts_per_tok=2,
                          shared_expert_intermediate_size=64, norm_topk_prob=True)
    block = qn.Qwen3NextSparseMoeBlock(cfg)
    for p in block.parameters():
        torch.nn.init.normal_(p, std=0.2)
    x = torch.randn(3, 50, 64)
    loop = qn.Qwen3NextExperts.forward
    y1, gx1, gp1 = run(block, x, loop)
    y2, gx2, gp2 = run(block, x, train.dense_experts_forward)
    qn.Qwen3NextExperts.forward = loop
    diffs = {"output": (y1 - y2).abs().max().item(), "input grad": (gx1 - gx2).abs().max().item()}
    diffs.update({f"grad {n}": (gp1[n] - gp2[n]).abs().max().item() for n in gp1})
    worst = max(diffs, key=diffs.get)
    print(f"largest difference: {worst} {diffs[worst]:.3g} (output {diffs['output']:.3g}, "
          f"input grad {diffs['input grad']:.3g})")
    if diffs[worst] > TOLERANCE:
        raise SystemExit(f"dense experts differ from the loop: {worst} by {diffs[worst]:.3g}")


if __name__ == "__main__":
    main()
