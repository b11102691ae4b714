#!/usr/bin/env python3
"""Ties a model's output head to its input embedding (`tie_word_embeddings`), one matrix for both,
so that the bytes the untied head held can go to more layers within issue 18's 50 MB: the
default model's 8,192 × 320 head is 5.2 MB, more than a layer (3.8 MB). `--keep lm_head` (the
default) makes the head the shared matrix, `--keep embed` the embedding; the other is dropped and
the config says `tie_word_embeddings: true` (flashlane and transformers then read
`model.embed_tokens.weight` for both; the MTP head shares them as before).

    tie_embeddings.py SRC_DIR OUT_DIR [--keep lm_head|embed]

Why: four fine-tuning stages of the 9-layer 4z6 model (23.4 M parameters, 46.9 MB) left its
counting at 95.0 % of held-out counts at T = 0 (bench/RESULTS.md session 66), the recipe spent;
tied, the model has room for two layers more (grow_depth.py) at 49.2 MB. Training must start
again from the tied model (`train.py --init OUT_DIR`): the logits change, and by far: session 67
tied the shipped model and trained it for 400 s (stage s4z12), and it lost most of what it knew
(first loss 12.2, held-out code loss 5.44 against 1.99 after; bench/RESULTS.md), so a tied model
is best trained tied from its first stage.

Needs no numpy or torch: names, the config and bytes only."""
import argparse
import os

from average_models import load_model_dir, save_model_dir

EMBED = "model.embed_tokens.weight"
HEAD = "lm_head.weight"


def tie(tensors, config, keep):
    """The tensors ({name: (dtype, shape, bytes)}) and config (dict) with one matrix for the
    embedding and the head: `keep` ("lm_head" or "embed") gives it. Raises ValueError for a model
    already tied or whose two matrices differ in dtype or shape."""
    if config.get("tie_word_embeddings") or HEAD not in tensors:
        raise ValueError("the model is tied already (no lm_head.weight, or tie_word_embeddings)")
    if EMBED not in tensors:
        raise ValueError(f"no {EMBED}")
    if tensors[EMBED][:2] != tensors[HEAD][:2]:
        raise ValueError(f"{EMBED} is {tensors[EMBED][:2]}, {HEAD} {tensors[HEAD][:2]}: not one matrix")
    out = {k: v for k, v in tensors.items() if k != HEAD}
    out[EMBED] = tensors[HEAD] if keep == "lm_head" else tensors[EMBED]
    tied = dict(config)
    tied["tie_word_embeddings"] = True
    return out, tied


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("src")
    ap.add_argument("out")
    ap.add_argument("--keep", choices=["lm_head", "embed"], default="lm_head",
                    help="which matrix both roles keep (default: the head, whose scale the logits have)")
    args = ap.parse_args()
    if os.path.realpath(args.out) == os.path.realpath(args.src):
        ap.error(f"OUT {args.out} is SRC: write the tied model elsewhere")
    tensors, metadata, config = load_model_dir(args.src)
    try:
        out, tied = tie(tensors, config, args.keep)
    except ValueError as e:
        raise SystemExit(f"tie_embeddings: {args.src}: {e}")
    size = save_model_dir(args.src, args.out, out, metadata, tied)
    print(f"tied (kept {args.keep}): {len(out)} tensors, {size / 1e6:.1f} MB -> {args.out}")


if __name__ == "__main__":
    main()
