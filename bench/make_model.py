#!/usr/bin/env python3
"""Makes the CPU benchmark model: a random-initialised Qwen3-0.6B-shaped checkpoint in bf16 with a
small trained BPE tokenizer.json, saved with `save_pretrained`, and the same weights converted to
GGUF bf16 with llama.cpp's converter (from the `llama-cpp-python` sdist's vendored source).

Random weights are fine for speed (not for draft acceptance rates). Nothing this writes is
committed: the model folder and the GGUF go outside the repository.

    /root/pyref/bin/python bench/make_model.py --out /work/peers/qwen3-0.6b-random \
        --llama-cpp /work/peers/llama_cpp_python-0.3.36/vendor/llama.cpp
"""

import argparse
import glob
import os
import sys
from pathlib import Path

import torch
from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast, Qwen3Config, Qwen3ForCausalLM

# Qwen3-0.6B's shape (config.json of Qwen/Qwen3-0.6B).
SHAPE = dict(
    hidden_size=1024,
    num_hidden_layers=28,
    num_attention_heads=16,
    num_key_value_heads=8,
    head_dim=128,
    intermediate_size=3072,
    vocab_size=151936,
    max_position_embeddings=40960,
    rope_theta=1000000.0,
    rms_norm_eps=1e-6,
    tie_word_embeddings=True,
    attention_bias=False,
)
SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>"]
# A small vocabulary: enough for readable text, quick to train on a few documents.
TOKENIZER_VOCAB = 2048


def train_tokenizer(out: Path) -> None:
    """A byte-level BPE trained on the shared docs and this repository's sources."""
    root = Path(__file__).resolve().parent.parent
    files = sorted(glob.glob("/work/shared/*.md")) + sorted(glob.glob(str(root / "**/*.rs"), recursive=True))
    files = [f for f in files if os.path.getsize(f) > 0][:400]
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


def make_model(out: Path, seed: int) -> None:
    torch.manual_seed(seed)
    config = Qwen3Config(**SHAPE, torch_dtype="bfloat16", bos_token_id=0, eos_token_id=2)
    torch.set_default_dtype(torch.bfloat16)
    model = Qwen3ForCausalLM(config)
    torch.set_default_dtype(torch.float32)
    model = model.to(torch.bfloat16).eval()
    model.save_pretrained(out, safe_serialization=True)


def convert(out: Path, gguf: Path, llama_cpp: Path) -> None:
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
    convert_hf_to_gguf.main()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--out", type=Path, required=True, help="model folder to write (outside the repo)")
    ap.add_argument("--gguf", type=Path, help="GGUF file to write; default OUT/model-bf16.gguf")
    ap.add_argument("--llama-cpp", type=Path, help="the sdist's vendor/llama.cpp; no GGUF without it")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)
    if not (args.out / "model.safetensors").exists():
        train_tokenizer(args.out)
        make_model(args.out, args.seed)
    if args.llama_cpp:
        convert(args.out, args.gguf or args.out / "model-bf16.gguf", args.llama_cpp)


if __name__ == "__main__":
    main()
