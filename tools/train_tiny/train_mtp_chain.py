"""Stage 3 of flashlane-tiny: fine-tune the MTP head alone for chained drafts (K > 1).

    python3 tools/train_tiny/train_mtp_chain.py --init models/flashlane-tiny --out OUT [--chain 3]

Stages 1-2 (train.py) train the head for one step: fed the trunk's hidden row h_i and x_{i+1}, it
predicts x_{i+2}. flashlane chains the head for K > 1 drafts: step s feeds the head's own output
row of step s - 1 and the previous draft, at position i + s, attending to the rows the trunk's
pairs left in the head's cache (positions <= i) and to the chain's own earlier rows. Untrained for
that, the second draft of a chain was right ~10-15 % of the time. Here the trunk is frozen (its
tensors are written back bit for bit) and the head learns all `--chain` steps at once,
teacher-forced, with exactly the inference-time attention pattern:

- call s of the head's layer runs the rows of steps 0..s of every anchor i concatenated, step t's
  row of anchor i at position i + t, under a mask letting it see step 0's rows j <= i (the cache
  rows of the trunk's pairs) and its own chain's rows of steps 1..t;
- step s's input is (embed(x_{i+s+1}), output row of step s - 1 of anchor i) and its target x_{i+s+2}.

Writes OUT/model.safetensors (the init's file with the mtp.* tensors replaced), the log, the loss
curves and `chain_eval.json`: tokens per round of greedy MTP drafting with K = 1..4, simulated
round by round on the trunk's own greedy replies (counting and code), before and after."""

import argparse
import json
import math
import os
import random
import shutil
import sys
import time

import numpy as np
import torch
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import data  # noqa: E402
import train  # noqa: E402
from train import log  # noqa: E402

COPIED = ["config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"]


def chain_mask(steps, n, device):
    """[1, 1, steps*n, steps*n] bool: row (a, i) may see key (b, j) when b = 0 and j <= i (the
    cache rows the trunk's pairs left), or 1 <= b <= a and j = i (its own chain's earlier rows)."""
    step = torch.arange(steps, device=device).repeat_interleave(n)
    anchor = torch.arange(n, device=device).repeat(steps)
    a, i = step[:, None], anchor[:, None]
    b, j = step[None, :], anchor[None, :]
    seen = ((b == 0) & (j <= i)) | ((b >= 1) & (b <= a) & (j == i))
    return seen[None, None]


def chain_outputs(model, mtp, ids, h, steps):
    """The head's output rows of every chain step: a list over s of [B, T-1, H]; step s's row at
    anchor i predicts x_{i+s+2} (positions past the end are computed on clamped tokens, unused)."""
    base = model.model
    T = ids.shape[1]
    n = T - 1
    dev = ids.device
    emb = base.embed_tokens(ids)
    anchors = torch.arange(n, device=dev)
    inputs, outs, prev = [], [], h[:, :n]
    for s in range(steps):
        e = emb[:, (anchors + s + 1).clamp(max=T - 1)]
        u = mtp.fc(torch.cat([mtp.pre_fc_norm_embedding(e), mtp.pre_fc_norm_hidden(prev)], -1))
        inputs.append(u)
        x = torch.cat(inputs, 1)
        pos = torch.cat([anchors + t for t in range(s + 1)])[None]
        y = mtp.layers[0](x, position_embeddings=base.rotary_emb(x, pos),
                          attention_mask=chain_mask(s + 1, n, dev))
        y = y[0] if isinstance(y, tuple) else y
        prev = mtp.norm(y[:, s * n:])
        outs.append(prev)
    return outs


def chain_losses(model, mtp, ids, steps):
    """Cross-entropy of each chain step against the text (trunk frozen, no grad through it)."""
    with torch.no_grad():
        h = model.model(input_ids=ids).last_hidden_state
    outs = chain_outputs(model, mtp, ids, h, steps)
    losses = []
    for s, m in enumerate(outs):
        valid = ids.shape[1] - 2 - s
        logits = model.lm_head(m[:, :valid])
        losses.append(train.weighted_ce(logits, ids[:, s + 2:], model.config.eos_token_id))
    return losses


def simulate_rounds(model, mtp, ids, prompt_len, k, draft_vocab):
    """Greedy MTP drafting round by round over `ids` (the trunk's own greedy reply after
    `prompt_len` prompt tokens): returns (rounds, tokens emitted). A round at anchor i (the last
    computed position, x_{i+1} just drawn) proposes K chained drafts and accepts the prefix equal to
    the trunk's greedy tokens; it emits accepted + 1 tokens."""
    with torch.no_grad():
        h = model.model(input_ids=ids).last_hidden_state
        greedy = model.lm_head(h)[0].argmax(-1)
        outs = chain_outputs(model, mtp, ids, h, k)
        drafts = [model.lm_head(m)[0, :, :draft_vocab].argmax(-1) for m in outs]
    T = ids.shape[1]
    i, rounds, emitted = prompt_len - 1, 0, 0
    while i + 1 < T - 1:
        accepted = 0
        for s in range(k):
            t = i + s + 1  # the draft of step s is the token at t + 1, greedy's row t
            if t >= T - 1 or drafts[s][i].item() != greedy[t].item():
                break
            accepted += 1
        step = min(accepted + 1, T - 1 - (i + 1))
        rounds += 1
        emitted += step
        i += step
    return rounds, emitted


def greedy_replies(model, tok, device, smoke):
    """(name, ids [1, T], prompt length): chat replies the trunk writes greedily."""
    eos = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    asks = [("counting", "Count from 1 to 1000.", 120 if smoke else 1200),
            ("counting", "Count from 513 to 1000.", 80 if smoke else 800),
            ("code", "Complete this Python function:\n```python\ndef is_prime(n):\n```", 60 if smoke else 200),
            ("code", "Complete this Python function:\n```python\ndef average(numbers):\n```", 60 if smoke else 200),
            ("code", "Complete this Python function:\n```python\ndef parse_args(argv):\n```", 60 if smoke else 200)]
    out = []
    for name, text, n in asks:
        p = tok.encode(f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n").ids
        ids = torch.tensor([p], device=device)
        with torch.no_grad():
            full = model.generate(ids, max_new_tokens=n, do_sample=False, eos_token_id=eos, pad_token_id=eos[1])
        out.append((name, full, len(p)))
    return out


def chain_eval(model, mtp, replies, draft_vocab, max_k=4):
    res = {}
    for name in sorted({r[0] for r in replies}):
        res[name] = {}
        for k in range(1, max_k + 1):
            rounds = emitted = 0
            for n, ids, p in replies:
                if n == name:
                    r, e = simulate_rounds(model, mtp, ids, p, k, draft_vocab)
                    rounds, emitted = rounds + r, emitted + e
            res[name][f"K={k}"] = {"rounds": rounds, "tokens": emitted, "tokens_per_round": emitted / max(1, rounds)}
    return res


def load(init, device):
    from safetensors.torch import load_file
    from tokenizers import Tokenizer
    from transformers import Qwen3NextForCausalLM

    model = Qwen3NextForCausalLM.from_pretrained(init, dtype=torch.float32)
    model.config._attn_implementation = "sdpa"
    sd = load_file(os.path.join(init, "model.safetensors"))
    mtp = train.MTP(model.config)
    mtp.load_state_dict({k: v.float() for k, v in train.fuse({k[4:]: v for k, v in sd.items()
                                                              if k.startswith("mtp.")}).items()}, strict=True)
    tok = Tokenizer.from_file(os.path.join(init, "tokenizer.json"))
    return model.to(device).eval(), mtp.to(device), tok, sd


def save(mtp, init_sd, out):
    """The init's tensors with mtp.* replaced; the trunk's are the very same bits."""
    from safetensors.torch import save_file

    msd = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in mtp.state_dict().items()}
    new = train.unfuse(msd, "mtp.")
    assert set(new) == {k for k in init_sd if k.startswith("mtp.")}, "the head's tensor names changed"
    tensors = {k: (new[k] if k in new else v).contiguous() for k, v in sorted(init_sd.items())}
    save_file(tensors, os.path.join(out, "model.safetensors"), metadata={"format": "pt"})


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--init", required=True, help="the stage-2 model directory (trunk + one-step head)")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261201)
    ap.add_argument("--chain", type=int, default=3, help="chain steps trained at once")
    ap.add_argument("--step-weights", default="1,1,1", help="loss weight of each chain step")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch", type=int, default=16)
    ap.add_argument("--seq-len", type=int, default=1024)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--warmup", type=int, default=20)
    ap.add_argument("--train-seconds", type=float, default=240)
    ap.add_argument("--code-mb", type=float, default=20)
    ap.add_argument("--per-package-mb", type=float, default=3)
    ap.add_argument("--tok-code-mb", type=float, default=1)
    ap.add_argument("--count-share", type=float, default=0.45)
    ap.add_argument("--short-count-frac", type=float, default=0.35)
    ap.add_argument("--mix", choices=["v1", "skills"], default="v1", help="synthetic chats (train.py --mix)")
    ap.add_argument("--shares", default="{}", help="JSON: token shares (train.py --shares)")
    ap.add_argument("--loss-on", default="all", help="build_data's masks are unused here (every token)")
    ap.add_argument("--stop-weight", type=float, default=1.0)
    ap.add_argument("--experts", choices=["loop", "dense"], default="loop", help="as train.py --experts")
    ap.add_argument("--smoke", action="store_true", help="a few steps on the CPU")
    args = ap.parse_args()
    # train.build_data's options this script leaves as train.py's defaults: every token trained
    # once, the default mix of count kinds, no short-row phase, the init's vocabulary size.
    args.first_step_weight = args.distractor_weight = args.off_grid_end_weight = 1
    args.count_kinds = ",".join(map(str, train.skills.COUNT_KINDS))
    args.count_off_grid = train.skills.COUNT_OFF_GRID
    args.phase1_steps, args.phase1_len = 0, args.seq_len
    args.vocab = 8192
    if args.experts == "dense":
        train.use_dense_experts()
    weights = [float(w) for w in args.step_weights.split(",")]
    assert len(weights) == args.chain, "one --step-weights entry per chain step"
    train.STOP_WEIGHT = args.stop_weight
    data.SHORT_COUNT_FRAC = args.short_count_frac
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    log(f"device {device}, torch {torch.__version__}, args {vars(args)}")
    os.makedirs(args.out, exist_ok=True)

    model, mtp, tok, init_sd = load(args.init, device)
    for p in model.parameters():
        p.requires_grad_(False)
    draft_vocab = min(model.config.vocab_size, max(model.config.vocab_size // 4, 1024))  # model::draft_vocab
    amp = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    replies = greedy_replies(model, tok, device, args.smoke)
    mtp.eval()
    with amp:
        before = chain_eval(model, mtp, replies, draft_vocab)
    log("before", json.dumps(before))

    # build_data reuses the init's tokenizer (args.init) and packs args.steps x batch rows
    _, seqs, _, _, _, _, meta = train.build_data(args, random.Random(args.seed))
    opt = torch.optim.AdamW(mtp.parameters(), lr=args.lr, betas=(0.9, 0.95), weight_decay=0.0,
                            fused=device.type == "cuda")
    hist = {"train": []}
    mtp.train()
    t0 = time.time()
    step = 0
    for step in range(1, args.steps + 1):
        progress = max((step - 1) / args.steps, (time.time() - t0) / args.train_seconds)
        if progress >= 1.0:
            step -= 1
            log(f"time budget reached at step {step}")
            break
        lr = args.lr * min(1.0, step / args.warmup) * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * progress)))
        for g in opt.param_groups:
            g["lr"] = lr
        x = torch.from_numpy(seqs[(step - 1) * args.batch: step * args.batch].astype(np.int64)).to(device)
        with amp:
            losses = chain_losses(model, mtp, x, args.chain)
            loss = sum(w * lo for w, lo in zip(weights, losses)) / sum(weights)
        loss.backward()
        gn = torch.nn.utils.clip_grad_norm_(mtp.parameters(), 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if step % 10 == 0 or step == 1 or args.smoke:
            rec = {"step": step, "loss": loss.item(), "steps": [lo.item() for lo in losses], "lr": lr,
                   "grad_norm": gn.item(), "seconds": round(time.time() - t0, 1)}
            hist["train"].append(rec)
            log(f"step {step:4d} loss {rec['loss']:.4f} per step {[round(v, 4) for v in rec['steps']]} "
                f"lr {lr:.2e} gn {rec['grad_norm']:.2f}")
    mtp.eval()
    with amp:
        after = chain_eval(model, mtp, replies, draft_vocab)
    log("after", json.dumps(after))

    save(mtp, init_sd, args.out)
    for f in COPIED:
        shutil.copy(os.path.join(args.init, f), os.path.join(args.out, f))
    hist["summary"] = {"steps": step, "train_seconds": time.time() - t0, "args": vars(args),
                       "data": {k: v for k, v in meta.items() if k != "sources"}}
    with open(os.path.join(args.out, "chain_history.json"), "w") as f:
        json.dump(hist, f, indent=1)
    with open(os.path.join(args.out, "chain_eval.json"), "w") as f:
        json.dump({"before": before, "after": after, "draft_vocab": draft_vocab}, f, indent=1)
    plot(hist, os.path.join(args.out, "loss_stage3.png"))
    log("done")


def plot(hist, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no plot")
        return
    steps = [r["step"] for r in hist["train"]]
    fig, ax = plt.subplots(figsize=(7, 4))
    for s in range(len(hist["train"][0]["steps"]) if hist["train"] else 0):
        ax.plot(steps, [r["steps"][s] for r in hist["train"]], label=f"chain step {s} (predicts x[i+{s + 2}])")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy")
    ax.set_title("flashlane-tiny stage 3: MTP head, chained drafts (trunk frozen)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)


if __name__ == "__main__":
    main()
