#!/usr/bin/env python3
"""Makes a benchmark model: a random-initialised checkpoint of a real shape (`--shape`, default
Qwen3-0.6B) in bf16 with a small trained BPE tokenizer.json, saved with `save_pretrained`, and
the same weights converted to GGUF bf16 with llama.cpp's converter (from the `llama-cpp-python`
sdist's vendored source). The weights are made on the GPU when there is one (seconds instead of
minutes for the larger shapes).

Random weights are fine for speed (not for draft acceptance rates). Nothing this writes is
committed: the model folder and the GGUF go outside the repository.

    /root/pyref/bin/python bench/make_model.py --out /work/peers/qwen3-0.6b-random \
        --llama-cpp /work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp
    python3 bench/make_model.py --shape qwen3-next-a3b-slice --out /tmp/a3b --llama-cpp LLAMA_SRC
"""

import argparse
import os
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

# Dense Qwen3 shapes (the config.json of Qwen/Qwen3-0.6B, -4B and -8B).
QWEN3_COMMON = dict(
    num_key_value_heads=8,
    head_dim=128,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    attention_bias=False,
)
# Qwen3-Next-80B-A3B's layer widths (its config.json) with 12 layers instead of 48 and 128
# experts instead of 512, so that the bf16 weights (6.3 B parameters) fit one GPU twice over.
QWEN3_NEXT_A3B_SLICE = dict(
    hidden_size=2048,
    num_hidden_layers=12,
    num_attention_heads=16,
    num_key_value_heads=2,
    head_dim=256,
    intermediate_size=5120,
    linear_conv_kernel_dim=4,
    linear_key_head_dim=128,
    linear_num_key_heads=16,
    linear_num_value_heads=32,
    linear_value_head_dim=128,
    moe_intermediate_size=512,
    shared_expert_intermediate_size=512,
    num_experts=128,
    num_experts_per_tok=10,
    norm_topk_prob=True,
    decoder_sparse_step=1,
    mlp_only_layers=[],
    full_attention_interval=4,
    partial_rotary_factor=0.25,
    rope_theta=10000000.0,
    rms_norm_eps=1e-6,
    vocab_size=151936,
    max_position_embeddings=262144,
    tie_word_embeddings=False,
)
# A smaller hybrid (the CPU comparison's second shape): the slice's layer kinds and ratios at half
# the width, 8 layers and 32 experts top-4 (0.79 B parameters, 0.13 B of them active a token
# beside the embedding and lm_head of 0.16 B each).
QWEN3_NEXT_SMALL = dict(
    QWEN3_NEXT_A3B_SLICE,
    hidden_size=1024,
    num_hidden_layers=8,
    num_attention_heads=8,
    num_key_value_heads=2,
    head_dim=256,
    intermediate_size=2816,
    linear_num_key_heads=8,
    linear_num_value_heads=16,
    num_experts=32,
    num_experts_per_tok=4,
)
SHAPES = {
    "qwen3-0.6b": ("qwen3", dict(QWEN3_COMMON, hidden_size=1024, num_hidden_layers=28,
                                  num_attention_heads=16, intermediate_size=3072,
                                  tie_word_embeddings=True)),
    "qwen3-4b": ("qwen3", dict(QWEN3_COMMON, hidden_size=2560, num_hidden_layers=36,
                                num_attention_heads=32, intermediate_size=9728,
                                tie_word_embeddings=True)),
    "qwen3-8b": ("qwen3", dict(QWEN3_COMMON, hidden_size=4096, num_hidden_layers=36,
                                num_attention_heads=32, intermediate_size=12288,
                                tie_word_embeddings=False)),
    "qwen3-next-a3b-slice": ("qwen3_next", QWEN3_NEXT_A3B_SLICE),
    "qwen3-next-small": ("qwen3_next", QWEN3_NEXT_SMALL),
}
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# A small vocabulary: enough for readable text, quick to train on a few documents.
TOKENIZER_VOCAB = 2048


def train_tokenizer(out: Path) -> None:
    """A byte-level BPE trained on this repository's docs and sources (symbolic links are not
    followed: a link to the checkout inside it would loop)."""
    root = Path(__file__).resolve().parent.parent
    files = []
    for d, subdirs, names in os.walk(root):
        subdirs[:] = sorted(s for s in subdirs if s not in ("target", ".git"))
        files += [os.path.join(d, n) for n in sorted(names) if n.endswith((".md", ".rs"))]
    files = [f for f in files if not os.path.islink(f) and os.path.getsize(f) > 0][:400]
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=TOKENIZER_VOCAB,
        special_tokens=SPECIALS,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train(files, trainer)
    fast = PreTrainedTokenizerFast(
        tokenizer_object=tok,
        eos_token="<|im_end|>",
        pad_token="<|endoftext|>",
    )
    fast.save_pretrained(out)


def make_model(out: Path, shape: str, seed: int) -> None:
    arch, dims = SHAPES[shape]
    if arch == "qwen3":
        from transformers import Qwen3Config as ConfigClass, Qwen3ForCausalLM as ModelClass
    else:
        from transformers import Qwen3NextConfig as ConfigClass, Qwen3NextForCausalLM as ModelClass
    torch.manual_seed(seed)
    config = ConfigClass(**dims, torch_dtype="bfloat16", bos_token_id=0, eos_token_id=2)
    device = "cuda" if torch.cuda.is_available() else "cpu"
    torch.set_default_dtype(torch.bfloat16)
    with torch.device(device):
        model = ModelClass(config)
    torch.set_default_dtype(torch.float32)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(out, safe_serialization=True)
    del model
    if device == "cuda":
        torch.cuda.empty_cache()


def convert(out: Path, gguf: Path, llama_cpp: Path, no_mtp: bool = False) -> None:
    """llama.cpp's converter, told that our tokenizer pre-tokenizes like qwen2 (its hash check
    knows only published tokenizers)."""
    sys.path.insert(0, str(llama_cpp))
    sys.path.insert(1, str(llama_cpp / "gguf-py"))
    import conversion.base  # noqa: E402

    conversion.base.TextModel.get_vocab_base_pre = lambda self, tokenizer: "qwen2"
    # Qwen2's set_vocab tries sentencepiece first and only falls back on a missing file, not on a
    # missing module; ours is a byte-level BPE, so go straight to the GPT-2 style vocabulary.
    import conversion.qwen  # noqa: E402

    conversion.qwen.Qwen2Model.set_vocab = lambda self: self._set_vocab_gpt2()
    import convert_hf_to_gguf  # noqa: E402

    sys.argv = ["convert_hf_to_gguf.py", str(out), "--outtype", "bf16", "--outfile", str(gguf)]
    # transformers writes no MTP weights for a random Qwen3-Next: the converter must not expect
    # them.
    if no_mtp:
        sys.argv.append("--no-mtp")
    convert_hf_to_gguf.main()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="model folder to write (outside the repo)")
    ap.add_argument("--gguf", type=Path, help="GGUF file to write; default OUT/model-bf16.gguf")
    ap.add_argument("--llama-cpp", type=Path, help="the sdist's vendor/llama.cpp; no GGUF without it")
    ap.add_argument("--shape", choices=sorted(SHAPES), default="qwen3-0.6b")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not (args.out / "config.json").exists():
        train_tokenizer(args.out)
        make_model(args.out, args.shape, args.seed)
    if args.llama_cpp:
        no_mtp = SHAPES[args.shape][0] == "qwen3_next"
        convert(args.out, args.gguf or args.out / "model-bf16.gguf", args.llama_cpp, no_mtp)


if __name__ == "__main__":
    main()
