"""Train flashlane-tiny: a ~21 M-parameter qwen3_next model with a one-layer MTP head.

    python3 tools/train_tiny/train.py --out OUT_DIR [--steps N] [--smoke]

Builds the corpus and tokenizer, trains trunk + MTP jointly, writes the checkpoint (HF layout,
bf16, trunk and mtp.* in one model.safetensors), the loss curves (PNG + JSON) and an evaluation.
See models/flashlane-tiny/README.md for the recipe and results."""

import argparse
import json
import math
import os
import random
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import data  # noqa: E402
import skills  # noqa: E402

T0 = time.time()


def log(*a):
    print(f"[{time.time() - T0:7.1f}s]", *a, flush=True)


# ---------------------------------------------------------------- model

def make_config(vocab_size, args, tok_ids):
    from transformers import Qwen3NextConfig

    if args.smoke:
        dims = dict(hidden_size=64, num_hidden_layers=4, num_attention_heads=2, num_key_value_heads=1,
                    head_dim=32, linear_num_key_heads=2, linear_num_value_heads=4, linear_key_head_dim=16,
                    linear_value_head_dim=16, num_experts=4, num_experts_per_tok=2,
                    moe_intermediate_size=32, shared_expert_intermediate_size=64, intermediate_size=128)
    else:
        dims = dict(hidden_size=320, num_hidden_layers=8, num_attention_heads=4, num_key_value_heads=2,
                    head_dim=64, linear_num_key_heads=4, linear_num_value_heads=8, linear_key_head_dim=64,
                    linear_value_head_dim=64, num_experts=8, num_experts_per_tok=2,
                    moe_intermediate_size=128, shared_expert_intermediate_size=256, intermediate_size=512)
    n = dims["num_hidden_layers"]
    cfg = Qwen3NextConfig(
        vocab_size=vocab_size,
        max_position_embeddings=args.max_positions,
        layer_types=["full_attention" if (i + 1) % 4 == 0 else "linear_attention" for i in range(n)],
        linear_conv_kernel_dim=4,
        rms_norm_eps=1e-6,
        rope_parameters={"rope_type": "default", "rope_theta": 10000.0, "partial_rotary_factor": 0.25},
        tie_word_embeddings=False,
        norm_topk_prob=True,
        decoder_sparse_step=1,
        mlp_only_layers=[],
        hidden_act="silu",
        attention_bias=False,
        initializer_range=0.02,
        router_aux_loss_coef=args.aux_coef,
        bos_token_id=tok_ids["<|endoftext|>"],
        eos_token_id=tok_ids["<|im_end|>"],
        pad_token_id=tok_ids["<|endoftext|>"],
        **dims,
    )
    cfg.architectures = ["Qwen3NextForCausalLM"]
    return cfg


class MTP(nn.Module):
    """Qwen3-Next multi-token-prediction head (models.md): one full-attention + MoE decoder layer.

    u_i = fc(concat[norm_e(embed(x_{i+1})), norm_h(h_i)]) -> layers.0 at position i -> norm ->
    lm_head predicts x_{i+2}. Reuses the trunk's embedding, rotary table and lm_head."""

    def __init__(self, config):
        super().__init__()
        from transformers.models.qwen3_next.modeling_qwen3_next import Qwen3NextDecoderLayer, Qwen3NextRMSNorm

        H = config.hidden_size
        full_idx = config.layer_types.index("full_attention")
        self.pre_fc_norm_embedding = Qwen3NextRMSNorm(H, eps=config.rms_norm_eps)
        self.pre_fc_norm_hidden = Qwen3NextRMSNorm(H, eps=config.rms_norm_eps)
        self.fc = nn.Linear(2 * H, H, bias=False)
        self.layers = nn.ModuleList([Qwen3NextDecoderLayer(config, full_idx)])
        self.norm = Qwen3NextRMSNorm(H, eps=config.rms_norm_eps)

    def forward(self, next_embeds, hidden, position_embeddings):
        u = self.fc(torch.cat([self.pre_fc_norm_embedding(next_embeds), self.pre_fc_norm_hidden(hidden)], -1))
        u = self.layers[0](u, position_embeddings=position_embeddings, attention_mask=None)
        if isinstance(u, tuple):
            u = u[0]
        return self.norm(u)


def dense_experts_forward(self, hidden_states, top_k_index, top_k_weights):
    """`Qwen3NextExperts.forward` as three batched matmuls over every expert and token, each
    expert's output weighted by the router's weight (0 for the experts a token did not choose):
    the same sum as transformers' loop over experts, in another order. The loop costs a host
    sync (`nonzero`, `where`) and ~10 small kernels an expert, a layer, forward and backward; for
    8 experts of width 128 those may cost more than the 4x arithmetic of computing every expert
    (not yet measured: `--bench` with each `--experts`)."""
    weights = torch.zeros(hidden_states.shape[0], self.num_experts, dtype=top_k_weights.dtype,
                          device=hidden_states.device).scatter(1, top_k_index, top_k_weights)
    gate, up = torch.einsum("nh,eih->eni", hidden_states, self.gate_up_proj).chunk(2, dim=-1)
    out = torch.einsum("eni,ehi->enh", self.act_fn(gate) * up, self.down_proj)
    return torch.einsum("enh,ne->nh", out, weights.to(out.dtype)).to(hidden_states.dtype)


def use_dense_experts():
    from transformers.models.qwen3_next import modeling_qwen3_next
    modeling_qwen3_next.Qwen3NextExperts.forward = dense_experts_forward


class RouterTap:
    """Collects router logits through forward hooks (independent of transformers' output plumbing)."""

    def __init__(self, modules):
        self.logits = []
        for m in modules:
            m.register_forward_hook(self.hook)

    def hook(self, mod, inp, out):
        self.logits.append(out[0] if isinstance(out, tuple) else out)

    def take(self):
        x, self.logits = self.logits, []
        return x


def aux_loss(router_logits, E, k):
    tot = 0.0
    for lg in router_logits:
        p = torch.softmax(lg.float(), -1)
        top = torch.topk(p, k, -1).indices
        frac = F.one_hot(top, E).float().sum(1).mean(0)  # tokens per expert (fraction x k)
        tot = tot + E * (frac * p.mean(0)).sum()
    return tot / max(1, len(router_logits))


STOP_WEIGHT = 1.0  # loss weight of <|im_end|> targets (set from --stop-weight): stopping is rare and matters
# Loss weight of a count's (or a numbered list's) decisions (set from --decision-weight): the
# target right after a number's last digit, a newline (go on) or `<|im_end|>` (stop), both alike.
# Weighting only the stop targets shifts the greedy choice towards stopping wherever the model is
# unsure (with weight w it stops as soon as p(stop) > 1 / (1 + w)): counts that end early. Stages
# 4d-4f (commit 1034dec) weighted the targets after a newline and `<|im_end|>` instead, which
# missed the go-on side of the decision (the newline itself) and so still leant towards stopping.
DECISION_WEIGHT = 1.0
NEWLINE_ID = -1  # the tokenizer's id of "\n" (a newline is one token), set in main
# Rows of held-out skill counts in each validation: 8 x 4096 tokens held 7,592 decisions but only
# 33 stops, too few to tell 30 % of missed stops from 20 %; 16 rows hold about twice as many.
VAL_SKILL_COUNT_ROWS = 16
DIGIT_IDS = None  # tensor of the ids of "0".."9" (a digit is one token), set in main
# Extra loss weight of the decisions next to a count's stop (set from --near-stop-weight and
# --near-stop-window): the stop itself and the NEAR_STOP_WINDOW go-ons before it, on top of
# DECISION_WEIGHT. Stage 4m's late stops wrote the count's last number and went on (a count of
# 380 decisions has one stop): the hard decisions are the few where the number is B or next to
# it, and with every decision weighted alike they are a fraction of a percent of the weight.
NEAR_STOP_WEIGHT = 1.0
NEAR_STOP_WINDOW = 3
# The ids of `<|im_start|>` and of the role word "assistant" after it (set in main): the near-stop
# marks count only the stops of assistant turns. A user turn that ends on a digit ("Count from 5
# to 35") is also a digit before `<|im_end|>`, and `decision_targets` counts it (as every stage
# did); stages 4o and 4p ran before this rule and weighted those ends by the near-stop weight too.
IM_START_ID = -1
ASSISTANT_ID = -1


def decision_targets(targets, prev, stop_id):
    """Where a count goes on or stops: the targets after a digit that are a newline or `stop_id`."""
    return torch.isin(prev, DIGIT_IDS) & ((targets == NEWLINE_ID) | (targets == stop_id))


def in_assistant_turn(targets, prev):
    """Whether each target lies in an assistant turn: the turn opened by the last
    `<|im_start|>` at or before it (in the same row) is an assistant's (its first target, the
    role word, is ASSISTANT_ID). False before a row's first `<|im_start|>`."""
    opens = prev == IM_START_ID  # the target is the turn's role word
    where = torch.arange(targets.shape[-1], device=targets.device).expand_as(targets)
    last_open = torch.cummax(torch.where(opens, where, torch.zeros_like(where)), dim=-1).values
    seen_open = torch.cummax(opens.long(), dim=-1).values.bool()
    return seen_open & (torch.gather(targets, -1, last_open) == ASSISTANT_ID)


def near_stop_targets(at, targets, prev, stop_id, window):
    """The decisions (`at`, `decision_targets`' mask) at most `window` decisions before a stop of an
    assistant turn, in that turn, the stop included: each decision's count of decisions up to the
    next such stop, from a reversed running minimum of the stops' places in the decisions' running
    count (and in the turns' running count, so that no mark crosses into an earlier turn or into
    the text packed between two chats)."""
    seen = torch.cumsum(at.long(), dim=-1)  # decisions so far, this one included
    turn = torch.cumsum((prev == IM_START_ID).long(), dim=-1)  # turns opened so far
    stops = at & (targets == stop_id) & in_assistant_turn(targets, prev)
    far = torch.iinfo(torch.long).max

    def at_next_stop(v):  # v (non-decreasing along the row) at the next stop, `far` past the last
        return torch.flip(torch.cummin(torch.flip(torch.where(stops, v, torch.full_like(v, far)), [-1]),
                                       dim=-1).values, [-1])

    next_stop = at_next_stop(seen)
    return at & (next_stop != far) & (next_stop - seen <= window) & (at_next_stop(turn) == turn)


def weighted_ce(logits, targets, stop_id, mask=None, prev=None):
    """Cross-entropy, `<|im_end|>` targets weighted by STOP_WEIGHT, the decisions of
    `decision_targets` (`prev`: the tokens before the targets) by DECISION_WEIGHT, and each target
    by `mask` (0: left out; a count's first step may weigh more, `weight_first_steps`)."""
    ce = F.cross_entropy(logits.float().reshape(-1, logits.shape[-1]), targets.reshape(-1), reduction="none")
    decide = DECISION_WEIGHT != 1.0 and prev is not None
    near = NEAR_STOP_WEIGHT != 1.0 and prev is not None
    if STOP_WEIGHT == 1.0 and mask is None and not decide and not near:
        return ce.mean()
    w = 1.0 + (STOP_WEIGHT - 1.0) * (targets.reshape(-1) == stop_id).float()
    at = decision_targets(targets, prev, stop_id) if decide or near else None
    if decide:
        w = w * (1.0 + (DECISION_WEIGHT - 1.0) * at.reshape(-1).float())
    if near:
        close = near_stop_targets(at, targets, prev, stop_id, NEAR_STOP_WINDOW).reshape(-1).float()
        w = w * (1.0 + (NEAR_STOP_WEIGHT - 1.0) * close)
    if mask is not None:
        w = w * mask.reshape(-1).float()
    return (ce * w).sum() / w.sum().clamp(min=1.0)


def count_decisions(greedy, targets, prev, stop_id):
    """A count's decisions (`decision_targets`): how often the greedy token is wrong there, how
    many of the real stops it misses, and how many of the go-ons it stops at. The mean loss hides
    these: each is one token of a reply, and a count of n numbers is right only if all n are."""
    at = decision_targets(targets, prev, stop_id)
    stops, goes = at & (targets == stop_id), at & (targets == NEWLINE_ID)
    close_goes = near_stop_targets(at, targets, prev, stop_id, NEAR_STOP_WINDOW) & (targets == NEWLINE_ID)
    return {"decisions": int(at.sum()),
            "early_stops_near_end": float(((greedy == stop_id) & close_goes).sum() / close_goes.sum().clamp(min=1)),
            "decision_errors": float(((greedy != targets) & at).sum() / at.sum().clamp(min=1)),
            "missed_stops": float(((greedy != targets) & stops).sum() / stops.sum().clamp(min=1)),
            "early_stops": float(((greedy == stop_id) & goes).sum() / goes.sum().clamp(min=1))}


def assistant_mask(ids, opening, im_end):
    """1 for the tokens of a chat's assistant turns (after `<|im_start|>assistant\\n`, through
    `<|im_end|>`), 0 for the rest (system and user turns, tool results, separators)."""
    ids = np.asarray(ids)
    n = len(opening)
    hits = np.ones(max(0, len(ids) - n + 1), dtype=bool)
    for j, t in enumerate(opening):
        hits &= ids[j:len(ids) - n + 1 + j] == t
    starts = np.flatnonzero(hits) + n
    ends = np.flatnonzero(ids == im_end)
    edge = np.zeros(len(ids) + 1, dtype=np.int32)
    for a in starts:
        k = np.searchsorted(ends, a)
        b = ends[k] + 1 if k < len(ends) else len(ids)
        edge[a] += 1
        edge[b] -= 1
    return (np.cumsum(edge[:-1]) > 0).astype(np.uint8)


def weight_first_steps(ids, mask, opening, newline, digits, weight):
    """`mask` (0/1 per token) with the tokens of a count's second number set to `weight`: in each
    assistant turn whose first line is a number, the digits of its second line. That is where a
    count takes its step (the first addition; later numbers repeat the difference), and where the
    held-out counts of stages 4h and 4i went wrong most often (`3025 to 4093 in steps of 12` gave
    3025, 3035, ...); a count of n numbers holds one such line among n, so the plain loss gives it
    little weight."""
    ids = np.asarray(ids)
    out = mask.copy()
    n = len(opening)
    hits = np.ones(max(0, len(ids) - n + 1), dtype=bool)
    for j, t in enumerate(opening):
        hits &= ids[j:len(ids) - n + 1 + j] == t
    is_digit = np.isin(ids, list(digits))
    for a in np.flatnonzero(hits) + n:
        p = a
        while p < len(ids) and is_digit[p]:
            p += 1
        if p == a or p >= len(ids) or ids[p] != newline:
            continue
        q = p + 1
        while q < len(ids) and is_digit[q]:
            q += 1
        out[p + 1:q] = np.where(out[p + 1:q] > 0, weight, 0)
    return out


def forward_losses(model, mtp, ids, tap, with_mtp=True, mask=None):
    """ids [B, T]; mask [B, T] (or None): which tokens are trained as targets. Returns (trunk CE,
    MTP CE, aux, trunk logits, mtp logits)."""
    base = model.model
    out = base(input_ids=ids)
    h = out.last_hidden_state  # final-normed
    logits = model.lm_head(h)
    loss = weighted_ce(logits[:, :-1], ids[:, 1:], model.config.eos_token_id,
                       None if mask is None else mask[:, 1:], prev=ids[:, :-1])
    mloss, mlogits = torch.zeros((), device=ids.device), None
    if with_mtp and mtp is not None and ids.shape[1] > 2:
        emb = base.embed_tokens(ids[:, 1:])
        pos = torch.arange(ids.shape[1] - 1, device=ids.device).unsqueeze(0)
        pe = base.rotary_emb(emb, pos)
        m = mtp(emb, h[:, :-1], pe)
        mlogits = model.lm_head(m)
        mloss = weighted_ce(mlogits[:, :-1], ids[:, 2:], model.config.eos_token_id,
                            None if mask is None else mask[:, 2:], prev=ids[:, 1:-1])
    rl = tap.take() if tap is not None else []
    aux = aux_loss(rl, model.config.num_experts, model.config.num_experts_per_tok) if rl else torch.zeros(())
    return loss, mloss, aux, logits, mlogits


# ---------------------------------------------------------------- checkpoint

def unfuse(sd, prefix_out=""):
    """Fused experts (gate_up_proj [E,2I,H], down_proj [E,H,I]) -> per-expert Qwen3-Next names."""
    out = {}
    for k, v in sd.items():
        if k.endswith("mlp.experts.gate_up_proj"):
            base = k[: -len("gate_up_proj")]
            inter = v.shape[1] // 2
            for e in range(v.shape[0]):
                out[f"{prefix_out}{base}{e}.gate_proj.weight"] = v[e, :inter]
                out[f"{prefix_out}{base}{e}.up_proj.weight"] = v[e, inter:]
        elif k.endswith("mlp.experts.down_proj"):
            base = k[: -len("down_proj")]
            for e in range(v.shape[0]):
                out[f"{prefix_out}{base}{e}.down_proj.weight"] = v[e]
        else:
            out[prefix_out + k] = v
    return out


def fuse(sd):
    """Inverse of unfuse, for loading mtp.* back into a module built by transformers."""
    out, groups = {}, {}
    for k, v in sd.items():
        parts = k.split(".")
        if "experts" in parts and parts[-1] == "weight" and parts[-2] in ("gate_proj", "up_proj", "down_proj"):
            i = parts.index("experts")
            base = ".".join(parts[: i + 1])
            groups.setdefault(base, {}).setdefault(int(parts[i + 1]), {})[parts[-2]] = v
        else:
            out[k] = v
    for base, ex in groups.items():
        E = max(ex) + 1
        out[base + ".gate_up_proj"] = torch.stack([torch.cat([ex[e]["gate_proj"], ex[e]["up_proj"]], 0) for e in range(E)])
        out[base + ".down_proj"] = torch.stack([ex[e]["down_proj"] for e in range(E)])
    return out


def save_checkpoint(model, mtp, cfg, tok, out_dir, args):
    from safetensors.torch import save_file

    os.makedirs(out_dir, exist_ok=True)
    sd = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in model.state_dict().items()}
    if cfg.tie_word_embeddings:
        # One matrix for both (tie_embeddings.py): written once, as the embedding.
        sd.pop("lm_head.weight", None)
    tensors = unfuse(sd)
    msd = {k: v.detach().to(torch.bfloat16).cpu().contiguous() for k, v in mtp.state_dict().items()}
    tensors.update(unfuse(msd, "mtp."))
    tensors = {k: v.contiguous() for k, v in sorted(tensors.items())}
    save_file(tensors, os.path.join(out_dir, "model.safetensors"), metadata={"format": "pt"})
    c = cfg.to_dict()
    c["architectures"] = ["Qwen3NextForCausalLM"]
    c["model_type"] = "qwen3_next"
    c["torch_dtype"] = "bfloat16"
    c["dtype"] = "bfloat16"
    c["mtp_num_hidden_layers"] = 1
    c["mtp_use_dedicated_embeddings"] = False
    c["full_attention_interval"] = 4
    c["use_cache"] = True
    with open(os.path.join(out_dir, "config.json"), "w") as f:
        json.dump(c, f, indent=2, sort_keys=True)
    eos = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    with open(os.path.join(out_dir, "generation_config.json"), "w") as f:
        json.dump({"bos_token_id": tok.token_to_id("<|endoftext|>"), "eos_token_id": eos,
                   "pad_token_id": tok.token_to_id("<|endoftext|>"), "do_sample": False}, f, indent=2)
    tok.save(os.path.join(out_dir, "tokenizer.json"))
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w") as f:
        json.dump(data.tokenizer_config(args.max_positions), f, indent=2)
    return sum(v.numel() for v in tensors.values())


# ---------------------------------------------------------------- data pipeline

def build_data(args, rng):
    code_train, code_held, sources = data.python_corpus(
        args.code_mb * 1_000_000, args.per_package_mb * 1_000_000, args.seed,
        heldout_files=4 if args.smoke else 40)
    log(f"python corpus: {len(code_train)} files, {sum(map(len, code_train)) / 1e6:.1f} MB; "
        f"packages used: {[s['package'] for s in sources if s['used']]}")
    funcs = data.extract_functions(code_train[: max(50, len(code_train) // 3)], rng, 30000)
    log(f"extracted {len(funcs)} functions for completion chats")

    # tokenizer: trained on a slice of code plus synthetic samples of every kind
    trng = random.Random(args.seed + 1)
    tok_texts = []
    acc = 0
    for t in code_train:
        if acc > args.tok_code_mb * 1_000_000:
            break
        tok_texts.append(t)
        acc += len(t)
    for name, fn in data.SYNTH_KINDS.items():
        for _ in range(200 if args.smoke else 3000):
            d = fn(trng)
            tok_texts.append(d[:20000])
    for _ in range(200 if args.smoke else 3000):
        tok_texts.append(data.gen_code_chat(trng, funcs))
    if args.init:
        from tokenizers import Tokenizer
        tok = Tokenizer.from_file(os.path.join(args.init, "tokenizer.json"))
    else:
        tok = data.train_tokenizer(tok_texts, args.vocab)
    log(f"tokenizer: vocab {tok.get_vocab_size()}")
    eot = tok.token_to_id("<|endoftext|>")

    # code stream
    enc = tok.encode_batch(code_train)
    code_stream = np.concatenate([np.array(e.ids + [eot], dtype=np.int32) for e in enc])
    held_code = [np.array(e.ids, dtype=np.int32) for e in tok.encode_batch(code_held)]
    log(f"code tokens: {len(code_stream) / 1e6:.2f} M ({sum(map(len, code_train)) / max(1, len(code_stream)):.2f} bytes/token)")

    # synthetic chats by token share
    total = args.steps * args.batch * args.seq_len
    gens = dict(data.SYNTH_KINDS, code_chat=lambda r: data.gen_code_chat(r, funcs))
    count_kinds = tuple(float(v) for v in args.count_kinds.split(","))
    if len(count_kinds) != 4 or min(count_kinds) < 0 or sum(count_kinds) <= 0:
        raise SystemExit(f"--count-kinds takes four weights >= 0 (up, steps, down, down steps): {args.count_kinds}")
    if not 0 <= args.count_off_grid <= 1:
        raise SystemExit(f"--count-off-grid takes a share from 0 to 1: {args.count_off_grid}")
    if args.mix == "skills":
        # issue 18: the default model's skills (tools/train_tiny/skills.py) beside what it knew
        gens.update(skills.SKILL_KINDS, think=lambda r: data.gen_think(r, arithmetic=False),
                    count=lambda r: skills.gen_count(r, args.short_count_frac, count_kinds,
                                                     args.count_off_grid))
        shares = {"count": args.count_share, "arith": 0.08, "words": 0.06, "calendar": 0.04, "spell": 0.06,
                  "cannot": 0.04, "roles": 0.04, "tools": 0.12, "repeat": 0.03, "sequence": 0.03,
                  "think": 0.01, "code_chat": 0.06}
        shares.update(json.loads(args.shares))
        if args.replay:
            # counts a model got wrong (tools/train_tiny/mine_counts.py), or counts like them
            mined = [c for path in args.replay for c in skills.load_mined(path)]
            if not mined or not 0 < args.replay_share < 1 or not 0 <= args.replay_near <= 1:
                raise SystemExit(f"--replay: {len(mined)} failed counts in {args.replay}, share "
                                 f"{args.replay_share} (0 to 1), near {args.replay_near} (0 to 1)")
            gens["count_replay"] = lambda r: skills.gen_count_replay(r, mined, args.replay_near)
            shares["count_replay"] = args.replay_share
            log(f"replay: {len(mined)} failed counts, share {args.replay_share}, near {args.replay_near}")
    else:
        shares = {"count": args.count_share, "repeat": 0.05, "sequence": 0.05, "think": 0.04, "small_talk": 0.01,
                  "code_chat": 0.10}
    docs, stats = [], {}
    distractors = [0]  # go-on decisions after a count's distractors, weighted by --distractor-weight
    off_grid_ends = [0]  # the last go-on and the stop of counts ending off the grid (--off-grid-end-weight)
    srng = random.Random(args.seed + 2)
    opening = tok.encode("<|im_start|>assistant\n").ids
    im_end = tok.token_to_id("<|im_end|>")
    newline_id = tok.encode("\n").ids[0]
    digit_ids = {tok.encode(d).ids[0] for d in "0123456789"}

    user_opening = tok.encode("<|im_start|>user\n").ids
    digit_of = {tok.encode(d).ids[0]: int(d) for d in "0123456789"}

    def reply_weights(ids, kind):
        m = assistant_mask(ids, opening, im_end)
        if args.first_step_weight > 1:
            m = weight_first_steps(ids, m, opening, newline_id, digit_ids, args.first_step_weight)
        if kind.startswith("count") and (args.distractor_weight > 1 or args.off_grid_end_weight > 1):
            turns = skills.count_turns(ids, user_opening, opening, im_end, newline_id, digit_of)
            for weight, at, seen in (
                    (args.distractor_weight, skills.distractor_decisions(turns, args.near_stop_window),
                     distractors),
                    (args.off_grid_end_weight, skills.off_grid_end_decisions(turns, ids, im_end), off_grid_ends)):
                if weight > 1:
                    m[at] = np.where(m[at] > 0, np.maximum(m[at], weight), 0)
                    seen[0] += len(at)
        return m

    for kind, share in shares.items():
        want, got, n = share * total * 1.05, 0, 0
        while got < want:
            batch = [gens[kind](srng) for _ in range(256)]
            for e in tok.encode_batch(batch):
                ids = e.ids[: args.seq_len - 1] + [eot]
                docs.append((np.array(ids, dtype=np.int32), reply_weights(ids, kind)))
                got += len(ids)
                n += 1
        stats[kind] = {"docs": n, "tokens": got}
    srng.shuffle(docs)
    chat_tokens = sum(len(d) for d, _ in docs)
    log(f"synthetic: {stats}")
    if args.distractor_weight > 1:
        log(f"distractors: {distractors[0]} go-on decisions weighted {args.distractor_weight}")
    if args.off_grid_end_weight > 1:
        log(f"off-grid ends: {off_grid_ends[0]} decisions weighted {args.off_grid_end_weight}")

    # pack: chats whole when they fit; code pieces fill the gaps and the rest
    code_frac = max(0.05, 1.0 - chat_tokens / max(1, total * 1.0))
    mean_chat = chat_tokens / max(1, len(docs))
    mean_piece = 600.0
    p_code = code_frac * mean_chat / (code_frac * mean_chat + (1 - code_frac) * mean_piece)
    prng = np.random.default_rng(args.seed + 3)
    nseq = args.steps * args.batch
    seqs = np.empty((nseq, args.seq_len), dtype=np.int32)
    masks = np.empty((nseq, args.seq_len), dtype=np.uint8)
    # Phase 1 cuts each row into rows of --phase1-len: a chat that crosses a cut would go on in
    # the next short row without its prompt, where a count's stop (weighted most) cannot be told
    # from the end it asked for. Those tokens are not trained in phase 1 (see phase1_masks).
    beheaded = np.zeros((nseq, args.seq_len), dtype=bool)
    cuts = range(args.phase1_len, args.seq_len, args.phase1_len) if args.phase1_steps else range(0)
    ci, di = 0, 0
    code_used = 0

    def take_code(n):
        nonlocal ci, code_used
        out = []
        while n > 0:
            if ci >= len(code_stream):
                ci = 0
            piece = code_stream[ci: ci + n]
            out.append(piece)
            ci += len(piece)
            n -= len(piece)
            code_used += len(piece)
        return np.concatenate(out)

    def code_part(n):
        piece = take_code(n)
        return piece, np.ones(len(piece), dtype=np.uint8)

    for s in range(nseq):
        parts, room = [], args.seq_len
        while room > 0:
            if di < len(docs) and prng.random() >= p_code:
                d, m = docs[di]
                if len(d) <= room:
                    start = args.seq_len - room
                    for cut in cuts:
                        if start < cut < start + len(d):
                            beheaded[s, cut: start + len(d)] = True
                    parts.append((d, m))
                    room -= len(d)
                    di += 1
                    continue
                parts.append(code_part(room))  # the chat starts the next sequence
                room = 0
            else:
                n = int(min(room, prng.integers(64, 1137)))
                parts.append(code_part(n))
                room -= n
        seqs[s] = np.concatenate([p for p, _ in parts])[: args.seq_len]
        masks[s] = np.concatenate([m for _, m in parts])[: args.seq_len]
    log(f"packed {nseq} x {args.seq_len}: chats used {di}/{len(docs)}, code tokens {code_used / 1e6:.2f} M "
        f"({code_used / (nseq * args.seq_len):.0%}); code epochs {code_used / len(code_stream):.2f}")
    perm = prng.permutation(nseq)
    seqs = seqs[perm]
    masks = masks[perm]
    beheaded = beheaded[perm]
    if args.loss_on == "all":
        masks[masks == 0] = 1  # every token trained; a count's first step keeps its weight
    phase1_masks = np.where(beheaded, 0, masks).astype(np.uint8)
    log(f"phase 1 leaves out {beheaded.mean():.1%} of the tokens: chats cut from their prompts")
    meta = {"sources": sources, "synthetic": stats, "code_files": len(code_train),
            "code_bytes": sum(map(len, code_train)), "code_stream_tokens": int(len(code_stream)),
            "code_tokens_trained": int(code_used), "chat_docs_trained": di}
    return tok, seqs, masks, phase1_masks, held_code, funcs, meta


# ---------------------------------------------------------------- evaluation

def count_check(model, tok, device, a, b, prompt=None):
    """Teacher-forced greedy check: the greedy reply equals `a..b` one per line (+ <|im_end|>) exactly
    when the argmax at every reply position is the reference token."""
    prompt = prompt or f"Count from {a} to {b}"
    ptxt = f"<|im_start|>user\n{prompt}<|im_end|>\n<|im_start|>assistant\n"
    p = tok.encode(ptxt).ids
    r = tok.encode(data.count_reply(a, b, 1) + "<|im_end|>").ids
    ids = torch.tensor([p + r], device=device)
    with torch.no_grad():
        logits = model(input_ids=ids).logits[0]
    pred = logits[len(p) - 1: -1].argmax(-1).tolist()
    wrong = [i for i, (x, y) in enumerate(zip(pred, r)) if x != y]
    res = {"prompt": prompt, "reply_tokens": len(r), "total_tokens": len(p) + len(r), "all_correct": not wrong,
           "wrong_positions": len(wrong)}
    if wrong:
        i = wrong[0]
        res["first_error"] = {"pos": i, "context": tok.decode(r[max(0, i - 12): i]), "expected": tok.decode([r[i]]),
                              "got": tok.decode([pred[i]])}
    return res


def mtp_acceptance(model, mtp, ids_list, device):
    """MTP top-1 on held-out text: vs the true x_{i+2} and vs the trunk's greedy token at i+1
    (the greedy-verification acceptance of a one-token draft)."""
    hit_true = hit_trunk = trunk_acc = n = 0
    for ids in ids_list:
        x = torch.tensor(ids[None, :], device=device, dtype=torch.long)
        with torch.no_grad():
            _, _, _, logits, mlogits = forward_losses(model, mtp, x, None)
        t_pred = logits[0].argmax(-1)          # predicts x_{i+1} at i
        m_pred = mlogits[0].argmax(-1)         # at i predicts x_{i+2}
        true2 = x[0, 2:]
        m = m_pred[:-1]
        hit_true += (m == true2).sum().item()
        hit_trunk += (m == t_pred[1:-1]).sum().item()
        trunk_acc += (t_pred[:-1] == x[0, 1:]).sum().item()
        n += len(true2)
    return {"tokens": n, "mtp_top1_vs_text": hit_true / max(1, n), "mtp_top1_vs_trunk_greedy": hit_trunk / max(1, n),
            "trunk_top1_vs_text": trunk_acc / max(1, n)}


def generate(model, tok, device, text, max_new, chat_mode=True):
    if chat_mode:
        text = f"<|im_start|>user\n{text}<|im_end|>\n<|im_start|>assistant\n"
    ids = torch.tensor([tok.encode(text).ids], device=device)
    eos = [tok.token_to_id("<|im_end|>"), tok.token_to_id("<|endoftext|>")]
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=max_new, do_sample=False, eos_token_id=eos,
                             pad_token_id=eos[1])
    return tok.decode(out[0, ids.shape[1]:].tolist(), skip_special_tokens=False)


def check_count_text(text, a, b):
    nums = [ln.strip() for ln in text.replace("<|im_end|>", "").strip().split("\n")]
    want = [str(x) for x in range(a, b + 1)]
    return {"numbers_written": len(nums), "all_in_order": nums == want,
            "first_mismatch": next((i for i, (x, y) in enumerate(zip(nums, want)) if x != y), None)}


def code_parses(text):
    import ast
    body = text.split("```python\n", 1)[-1].split("```", 1)[0] if "```" in text else text
    try:
        ast.parse(body)
        return True
    except SyntaxError:
        return False


def evaluate(out_dir, model_mem, mtp_mem, tok, held_code, device, args, deadline):
    from safetensors.torch import load_file
    from transformers import Qwen3NextForCausalLM

    ev = {}
    dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
    model = Qwen3NextForCausalLM.from_pretrained(out_dir, dtype=dtype).to(device).eval()
    # MTP from the saved file, to prove the mtp.* names round-trip
    sd = load_file(os.path.join(out_dir, "model.safetensors"))
    msd = fuse({k[4:]: v for k, v in sd.items() if k.startswith("mtp.")})
    mtp = MTP(model.config).to(device=device, dtype=dtype).eval()
    missing, unexpected = mtp.load_state_dict(msd, strict=False)
    ev["mtp_reload"] = {"missing": list(missing), "unexpected": list(unexpected)}
    ev["trunk_params"] = sum(p.numel() for p in model.parameters())
    ev["mtp_params"] = sum(p.numel() for p in mtp.parameters())
    log(f"reloaded: trunk {ev['trunk_params'] / 1e6:.2f} M, mtp {ev['mtp_params'] / 1e6:.2f} M, {ev['mtp_reload']}")

    small = args.smoke
    ev["count_teacher_forced"] = [count_check(model, tok, device, 1, 30 if small else 1000,
                                              prompt="Count from 1 to 30" if small else "Count from 1 to 1000")]
    if not small:
        for a, b, pr in [(1, 20, "Count from 1 to 20."), (1, 100, None), (3, 57, None), (1, 500, None),
                         (1, 1000, "Count from 1 to 1000."), (1, 1000, "Count to 1000."), (1, 1700, None),
                         (250, 1300, None), (1, 2400, None)]:
            ev["count_teacher_forced"].append(count_check(model, tok, device, a, b, pr))
    for r in ev["count_teacher_forced"]:
        log("count (teacher-forced greedy):", json.dumps(r))

    # MTP acceptance on held-out counting and code
    crng = random.Random(12345)
    count_ids = []
    for _ in range(2 if small else 6):
        a = crng.randint(0, 3000)
        b = a + crng.randint(50, 60 if small else 700)
        count_ids.append(np.array(tok.encode(data.chat(f"Count from {a} to {b}.", data.count_reply(a, b, 1))).ids))
    code_ids = [c[: args.seq_len] for c in held_code if len(c) > 64][: 4 if small else 40]
    mtp_model = model
    ev["mtp_acceptance"] = {"counting": mtp_acceptance(mtp_model, mtp, count_ids, device),
                            "code": mtp_acceptance(mtp_model, mtp, code_ids, device)}
    log("mtp acceptance:", json.dumps(ev["mtp_acceptance"]))

    # samples
    samples = {}
    prompts = [("chat", "Complete this Python function:\n```python\ndef is_prime(n):\n```", 160),
               ("chat", "Complete this Python function:\n```python\ndef average(numbers):\n```", 160),
               ("raw", "def fibonacci(n):\n", 120),
               ("raw", "import os\n\n\ndef list_python_files(root):\n", 120),
               ("chat", "Count from 1 to 20.", 80),
               ("chat", 'Repeat "hello world" 3 times.', 60),
               ("chat", "List the letters of the alphabet.", 80),
               ("chat", "What is 123 + 456?", 60),
               ("chat", "Who are you?", 60),
               ("chat", "Write the multiplication table of 7.", 120)]
    if small:
        prompts = prompts[:3]
    for mode, p, n in prompts:
        if time.time() > deadline:
            log("out of time: remaining samples skipped")
            break
        t = time.time()
        txt = generate(model, tok, device, p, 24 if small else n, chat_mode=(mode == "chat"))
        samples[p] = {"mode": mode, "reply": txt, "parses": code_parses(txt) if "def " in p else None,
                      "seconds": round(time.time() - t, 2)}
        log(f"--- {mode}: {p!r}\n{txt}")
    ev["samples"] = samples

    # the acceptance task, free-running greedy, if time allows
    b = 30 if small else 1000
    gen_tokens = sum(len(tok.encode(v["reply"]).ids) for v in samples.values())
    tps = gen_tokens / max(1e-3, sum(v["seconds"] for v in samples.values()))
    ev["generate_tokens_per_second"] = round(tps, 1)
    log(f"generate speed ~{tps:.0f} tokens/s")
    need = min(args.eval_gen_tokens, 4000) / max(tps, 1e-3)
    if args.eval_gen_tokens > 0 and time.time() + need < deadline:
        t = time.time()
        txt = generate(model, tok, device, f"Count from 1 to {b}", 60 if small else args.eval_gen_tokens)
        r = check_count_text(txt, 1, b)
        r["seconds"] = round(time.time() - t, 1)
        r["tail"] = txt[-60:]
        ev["count_generate"] = r
        log("count (free-running greedy generate):", json.dumps(r))
    else:
        ev["count_generate"] = "skipped on the device (see the teacher-forced check; check_local.py generates it)"
    return ev


# ---------------------------------------------------------------- main

def plot(hist, path):
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        log("matplotlib missing: no PNG")
        return
    fig, ax = plt.subplots(figsize=(8, 5))
    s = [h["step"] for h in hist["train"]]
    ax.plot(s, [h["loss"] for h in hist["train"]], label="trunk (next token)")
    ax.plot(s, [h["mtp"] for h in hist["train"]], label="MTP (next-next token)")
    for key, style in (("val_code", "o--"), ("val_count", "s--")):
        v = [(h["step"], h[key]) for h in hist["val"] if key in h]
        if v:
            ax.plot(*zip(*v), style, label=f"held-out {key[4:]} (trunk)")
    if "phase2_step" in hist:
        ax.axvline(hist["phase2_step"], color="grey", ls=":", label=hist.get("phase2_label", "phase 2"))
    ax.set_yscale("log")
    ax.set_xlabel("step")
    ax.set_ylabel("cross-entropy (nats)")
    ax.set_title("flashlane-tiny training")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=110)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=20261129)
    ap.add_argument("--steps", type=int, default=900)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--micro-batches", type=int, default=1,
                    help="run each step's --batch rows in this many equal parts (the mean of their "
                         "losses' gradients), for a batch larger than the card's memory holds at once")
    ap.add_argument("--seq-len", type=int, default=4096)
    ap.add_argument("--lr", type=float, default=2e-3)
    ap.add_argument("--warmup", type=int, default=60)
    ap.add_argument("--ema", type=float, default=0.0,
                    help="save an exponential moving average of the weights with this decay a step (0: the "
                         "last step's weights; with it, the last step's go to OUT_raw too). It starts at the "
                         "--init weights, so a stage ends between its "
                         "parent and its last step, as session 28's mean of 4p and 4u did (kept: 4w)")
    ap.add_argument("--mtp-weight", type=float, default=0.3)
    ap.add_argument("--aux-coef", type=float, default=0.01)
    ap.add_argument("--vocab", type=int, default=8192)
    ap.add_argument("--max-positions", type=int, default=8192)
    ap.add_argument("--code-mb", type=float, default=40)
    ap.add_argument("--per-package-mb", type=float, default=6)
    ap.add_argument("--tok-code-mb", type=float, default=12)
    ap.add_argument("--train-seconds", type=float, default=420, help="LR schedule and stop follow max(step, time)")
    ap.add_argument("--total-seconds", type=float, default=570, help="skip optional eval after this")
    ap.add_argument("--eval-gen-tokens", type=int, default=4000, help="free-running count generation; 0 skips")
    ap.add_argument("--phase1-steps", type=int, default=0, help="first steps on rows cut to --phase1-len")
    ap.add_argument("--phase1-len", type=int, default=2048)
    ap.add_argument("--stop-weight", type=float, default=1.0)
    ap.add_argument("--decision-weight", type=float, default=1.0,
                    help="loss weight of the newline or <|im_end|> right after a number (go on or stop)")
    ap.add_argument("--near-stop-weight", type=float, default=1.0,
                    help="extra loss weight of a count's stop and the go-ons just before it (see --near-stop-window)")
    ap.add_argument("--near-stop-window", type=int, default=3,
                    help="how many go-on decisions before a stop --near-stop-weight weighs too")
    ap.add_argument("--distractor-weight", type=int, default=1,
                    help="loss weight (1-255) of a count's go-on decision after a number that looks like "
                         "its end (skills.count_distractor: 5299 in a count to 5399)")
    ap.add_argument("--off-grid-end-weight", type=int, default=1,
                    help="loss weight (1-255) of the last go-on and the stop of a count whose end is off "
                         "its step's grid (skills.off_grid_end_decisions: 478 to 784 by 7 stops after 779)")
    ap.add_argument("--first-step-weight", type=int, default=1,
                    help="loss weight (1-255) of a count's second number, where it takes its step")
    ap.add_argument("--init", default="", help="continue from this checkpoint (its tokenizer too)")
    ap.add_argument("--count-share", type=float, default=0.30)
    ap.add_argument("--mix", choices=["v1", "skills"], default="v1",
                    help="synthetic chats: v1 (stages 1-2 of the first model) or skills (issue 18)")
    ap.add_argument("--short-count-frac", type=float, default=0.35)
    ap.add_argument("--count-kinds", default=",".join(map(str, skills.COUNT_KINDS)),
                    help="skills mix: weights of counts up by one, up in steps, down by one, down in steps")
    ap.add_argument("--count-off-grid", type=float, default=skills.COUNT_OFF_GRID,
                    help="skills mix: share of stepped counts whose end is off the step's grid")
    ap.add_argument("--replay", action="append", default=[],
                    help="skills mix: a mine_counts.py file whose failed counts are trained again "
                         "(repeat for several)")
    ap.add_argument("--replay-share", type=float, default=0.1,
                    help="with --replay: the token share of those counts (beside --count-share)")
    ap.add_argument("--replay-near", type=float, default=0.5,
                    help="with --replay: the share of them drawn like a failed count (skills.count_near) "
                         "rather than as it was")
    ap.add_argument("--loss-on", choices=["all", "replies"], default="all",
                    help="train on every token, or only on the assistant's turns of chats (and all code)")
    ap.add_argument("--shares", default="{}", help="JSON: token shares replacing the skills mix's")
    ap.add_argument("--experts", choices=["loop", "dense"], default="loop",
                    help="MoE experts as transformers' loop over experts, or every expert on every token "
                         "weighted by the router (the same sum; fewer, larger kernels and no host sync)")
    ap.add_argument("--bench", default="", help="comma list of BxT shapes to time (8 steps each) before training")
    ap.add_argument("--smoke", action="store_true", help="tiny config for a CPU check")
    ap.add_argument("--require-fla", action="store_true",
                    help="stop unless transformers runs the DeltaNet layers on fla's kernels (fetch_fla.sh)")
    args = ap.parse_args()
    # Checked before the data (a minute on the GPU machine) is made.
    if args.micro_batches < 1 or args.batch % args.micro_batches:
        ap.error(f"--micro-batches {args.micro_batches}: must be at least 1 and divide --batch {args.batch}")
    if not 0.0 <= args.ema < 1.0:
        ap.error(f"--ema {args.ema}: the decay must be in [0, 1)")
    if args.ema > 0 and not args.init:
        ap.error("--ema averages from the --init weights: give --init (from random weights the average "
                 "would keep a share of noise)")
    for flag, weight in (("--distractor-weight", args.distractor_weight),
                         ("--off-grid-end-weight", args.off_grid_end_weight)):
        if not 1 <= weight <= 255:
            raise SystemExit(f"{flag} takes 1 to 255 (a weight per token in uint8): {weight}")
    if not 1 <= args.first_step_weight <= 255:
        raise SystemExit(f"--first-step-weight takes 1 to 255 (a weight per token in uint8): {args.first_step_weight}")
    global STOP_WEIGHT, DECISION_WEIGHT, NEWLINE_ID, DIGIT_IDS, NEAR_STOP_WEIGHT, NEAR_STOP_WINDOW
    global IM_START_ID, ASSISTANT_ID
    STOP_WEIGHT = args.stop_weight
    DECISION_WEIGHT = args.decision_weight
    NEAR_STOP_WEIGHT, NEAR_STOP_WINDOW = args.near_stop_weight, args.near_stop_window

    data.SHORT_COUNT_FRAC = args.short_count_frac
    random.seed(args.seed)
    np.random.seed(args.seed)
    torch.manual_seed(args.seed)
    device = torch.device("cuda" if torch.cuda.is_available() else "cpu")
    log(f"device {device}, torch {torch.__version__}, args {vars(args)}")
    import transformers
    from transformers.utils.import_utils import is_flash_linear_attention_available
    fla = is_flash_linear_attention_available()
    log(f"transformers {transformers.__version__}; DeltaNet layers on "
        f"{'fla kernels' if fla else 'the PyTorch fallback (no fla)'}")
    if args.require_fla and not fla:
        raise SystemExit("--require-fla: fla is not importable here (tools/train_tiny/fetch_fla.sh)")
    if args.experts == "dense":
        use_dense_experts()
    log(f"MoE experts: {args.experts}")
    os.makedirs(args.out, exist_ok=True)

    tok, seqs, masks, phase1_masks, held_code, funcs, meta = build_data(args, random.Random(args.seed))
    ids_of = {t: tok.token_to_id(t) for t in data.SPECIALS}
    newline = tok.encode("\n").ids
    assert len(newline) == 1, f"[train-newline] a newline must be one token, got {newline}"
    NEWLINE_ID = newline[0]
    digits = [tok.encode(d).ids for d in "0123456789"]
    assert all(len(d) == 1 for d in digits), f"[train-digits] a digit must be one token, got {digits}"
    DIGIT_IDS = torch.tensor([d[0] for d in digits], device=device)
    IM_START_ID = ids_of["<|im_start|>"]
    ASSISTANT_ID = tok.encode("assistant").ids[0]
    others = {tok.encode(role).ids[0] for role in ("system", "user", "tool")}
    assert ASSISTANT_ID not in others, f"[train-roles] a role word starts like 'assistant': {others}"
    cfg = make_config(tok.get_vocab_size(), args, ids_of)
    cfg._attn_implementation = "sdpa"

    from transformers import Qwen3NextForCausalLM
    if args.init:
        # stage 2: continue from a stage-1 checkpoint (trunk via transformers, mtp.* from the same file)
        from safetensors.torch import load_file
        model = Qwen3NextForCausalLM.from_pretrained(args.init, dtype=torch.float32)
        cfg = model.config
        cfg._attn_implementation = "sdpa"
        if cfg.tie_word_embeddings:
            # A tied model (tie_embeddings.py) trains one matrix for both roles, as it is served.
            assert model.lm_head.weight.data_ptr() == model.model.embed_tokens.weight.data_ptr(), \
                "[train-tied] tie_word_embeddings, yet the head and the embedding are two matrices"
        mtp = MTP(cfg)
        sd = load_file(os.path.join(args.init, "model.safetensors"))
        mtp.load_state_dict({k: v.float() for k, v in fuse({k[4:]: v for k, v in sd.items() if k.startswith("mtp.")}).items()},
                            strict=True)
        log(f"initialised from {args.init}")
    else:
        model = Qwen3NextForCausalLM(cfg)
        mtp = MTP(cfg)
        mtp.apply(model._init_weights)
    model.to(device).train()
    mtp.to(device).train()
    tap = RouterTap([l.mlp.gate for l in list(model.model.layers) + list(mtp.layers)])
    n_trunk = sum(p.numel() for p in model.parameters())
    n_mtp = sum(p.numel() for p in mtp.parameters())
    log(f"params: trunk {n_trunk / 1e6:.2f} M, mtp {n_mtp / 1e6:.2f} M, layer_types {cfg.layer_types}")

    params = list(model.named_parameters()) + [("mtp." + n, p) for n, p in mtp.named_parameters()]
    decay = [p for n, p in params if p.ndim >= 2 and "embed" not in n]
    no_decay = [p for n, p in params if not (p.ndim >= 2 and "embed" not in n)]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": 0.1}, {"params": no_decay, "weight_decay": 0.0}],
                            lr=args.lr, betas=(0.9, 0.95), eps=1e-8, fused=device.type == "cuda")
    amp = torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda")

    if args.bench:
        flat = seqs.reshape(-1)
        sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
        for shape in args.bench.split(","):
            B, T = map(int, shape.split("x"))
            x = torch.from_numpy(flat[: B * T].reshape(B, T).astype(np.int64)).to(device)
            for i in range(12):
                if i == 4:
                    sync()
                    t = time.time()
                with amp:
                    lo, ml, ax, _, _ = forward_losses(model, mtp, x, tap)
                    (lo + args.mtp_weight * ml + args.aux_coef * ax).backward()
                opt.zero_grad(set_to_none=True)
            sync()
            dt = (time.time() - t) / 8
            mem = torch.cuda.max_memory_allocated() / 2**30 if device.type == "cuda" else 0
            log(f"bench {B}x{T}: {dt * 1000:.0f} ms/step, {B * T / dt / 1e3:.0f} k tok/s, mem {mem:.1f} GiB")

    # held-out validation batches
    vrng = random.Random(args.seed + 99)
    vcode = np.concatenate(held_code)[: 2 * args.seq_len].reshape(2, -1) if sum(map(len, held_code)) >= 2 * args.seq_len else None
    vcount = []
    while sum(map(len, vcount)) < 2 * args.seq_len:
        vcount.append(np.array(tok.encode(data.gen_count(vrng)).ids + [ids_of["<|endoftext|>"]], dtype=np.int32))
    vcount = np.concatenate(vcount)[: 2 * args.seq_len].reshape(2, -1)
    # With the skills mix: held-out counts of the skills' kinds (steps, down, any start), the
    # distribution eval_skills.py asks, for the decisions' figures.
    vskill = None
    if args.mix == "skills":
        srng, vskill = random.Random(args.seed + 98), []
        while sum(map(len, vskill)) < VAL_SKILL_COUNT_ROWS * args.seq_len:
            short = srng.random() < 0.5
            q, nums = skills.pick_held_out(srng, lambda: skills.count_case(srng, short),
                                           lambda c: skills.count_key(c[0]))
            chat = skills.conversation([(q, "\n".join(map(str, nums)))])
            vskill.append(np.array(tok.encode(chat).ids + [ids_of["<|endoftext|>"]], dtype=np.int32))
        vskill = np.concatenate(vskill)[: VAL_SKILL_COUNT_ROWS * args.seq_len].reshape(VAL_SKILL_COUNT_ROWS, -1)

    def validate(step):
        model.eval(); mtp.eval()
        r = {"step": step}
        with torch.no_grad(), amp:
            for name, arr in (("val_code", vcode), ("val_count", vcount), ("val_skill_count", vskill)):
                if arr is None:
                    continue
                x = torch.from_numpy(arr.astype(np.int64)).to(device)
                lo, ml, _, logits, _ = forward_losses(model, mtp, x, tap)
                r[name] = lo.item()
                r[name + "_mtp"] = ml.item()
                if name == "val_skill_count":
                    r.update(count_decisions(logits[:, :-1].argmax(-1), x[:, 1:], x[:, :-1],
                                             ids_of["<|im_end|>"]))
        model.train(); mtp.train()
        log("val", json.dumps(r))
        return r

    # The moving average in f32 (a copy, so it does not move with the weights): lerp after each step.
    ema = [p.detach().float().clone() for _, p in params] if args.ema > 0 else None

    hist = {"train": [], "val": []}
    t_train = time.time()
    step = 0
    tokens = 0
    for step in range(1, args.steps + 1):
        elapsed = time.time() - t_train
        progress = max((step - 1) / args.steps, elapsed / args.train_seconds)
        if progress >= 1.0:
            log(f"time budget reached at step {step - 1}")
            step -= 1
            break
        if step <= args.warmup:
            lr = args.lr * step / args.warmup
        else:
            lr = args.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, progress))))
        for g in opt.param_groups:
            g["lr"] = lr
        rows = seqs[(step - 1) * args.batch: step * args.batch]
        phase1 = step <= args.phase1_steps
        row_masks = (phase1_masks if phase1 else masks)[(step - 1) * args.batch: step * args.batch]
        if phase1:
            # curriculum: short sequences first (the Gated DeltaNet fallback's chunk loop makes long rows slow)
            rows = rows.reshape(-1, args.phase1_len)
            row_masks = row_masks.reshape(-1, args.phase1_len)
        elif step == args.phase1_steps + 1 and args.phase1_steps:
            log(f"phase 2: sequences of {args.seq_len} tokens from step {step}")
            hist["phase2_step"] = step
            hist["phase2_label"] = f"sequences {args.phase1_len} -> {args.seq_len} tokens"
        x = torch.from_numpy(rows.astype(np.int64)).to(device, non_blocking=True)
        plain = (args.loss_on == "all" and args.first_step_weight == 1 and args.distractor_weight == 1
                 and args.off_grid_end_weight == 1 and not phase1)
        mask = None if plain else torch.from_numpy(row_masks).to(device, non_blocking=True)
        # A step's rows in `--micro-batches` equal parts, each part's losses backward at 1/parts
        # (the gradient of their mean), so a batch too large for the card's memory still takes
        # one optimizer step; the logged losses are the parts' means.
        parts = args.micro_batches
        mask_parts = [None] * parts if mask is None else mask.chunk(parts)
        lo = ml = ax = 0.0
        for x_part, mask_part in zip(x.chunk(parts), mask_parts):
            with amp:
                p_lo, p_ml, p_ax, _, _ = forward_losses(model, mtp, x_part, tap, mask=mask_part)
                loss = (p_lo + args.mtp_weight * p_ml + args.aux_coef * p_ax) / parts
            loss.backward()
            lo, ml, ax = lo + p_lo.detach() / parts, ml + p_ml.detach() / parts, ax + p_ax.detach() / parts
        gn = torch.nn.utils.clip_grad_norm_([p for _, p in params], 1.0)
        opt.step()
        opt.zero_grad(set_to_none=True)
        if ema is not None:
            with torch.no_grad():
                torch._foreach_lerp_(ema, [p.detach().float() for _, p in params], 1.0 - args.ema)
        tokens += x.numel()
        if step % 10 == 0 or step == 1 or args.smoke:
            rec = {"step": step, "loss": lo.item(), "mtp": ml.item(), "aux": float(ax.detach()), "lr": lr,
                   "grad_norm": gn.item(), "tokens": tokens, "seconds": round(time.time() - t_train, 1)}
            hist["train"].append(rec)
            log(f"step {step:5d} loss {rec['loss']:.4f} mtp {rec['mtp']:.4f} aux {rec['aux']:.3f} lr {lr:.2e} "
                f"gn {rec['grad_norm']:.2f} {tokens / (time.time() - t_train) / 1e3:.0f} k tok/s")
        if step % max(1, args.steps // 4) == 0 and step != args.steps:
            hist["val"].append(validate(step))
    hist["val"].append(validate(step))
    if ema is not None:
        # The last step's figures are logged above; from here on (the last validation, the saved
        # file, the evaluation) the weights are the average. The last step's own weights are saved
        # first, beside it (OUT_raw), so one run gives both for the evaluation that chooses.
        raw_out = args.out.rstrip("/") + "_raw"
        save_checkpoint(model, mtp, cfg, tok, raw_out, args)
        log(f"weights: the last step's saved to {raw_out}")
        with torch.no_grad():
            for (_, p), e in zip(params, ema):
                p.copy_(e.to(p.dtype))
        log(f"weights: the moving average (decay {args.ema}; the --init weights' share {args.ema ** step:.3f})")
        r = validate(step)
        r["ema"] = args.ema
        hist["val"].append(r)
    train_seconds = time.time() - t_train
    log(f"trained {step} steps, {tokens / 1e6:.1f} M tokens in {train_seconds:.0f} s")

    model.eval(); mtp.eval()
    n_saved = save_checkpoint(model, mtp, cfg, tok, args.out, args)
    log(f"saved {n_saved / 1e6:.2f} M tensors elements to {args.out}")
    hist["summary"] = {"steps": step, "tokens": tokens, "train_seconds": train_seconds, "params_trunk": n_trunk,
                       "params_mtp": n_mtp, "args": vars(args), "data": meta}
    with open(os.path.join(args.out, "loss_history.json"), "w") as f:
        json.dump(hist, f, indent=1)
    plot(hist, os.path.join(args.out, "loss.png"))

    ev = evaluate(args.out, model, mtp, tok, held_code, device, args, deadline=T0 + args.total_seconds)
    with open(os.path.join(args.out, "eval.json"), "w") as f:
        json.dump(ev, f, indent=1)
    log("done")


if __name__ == "__main__":
    main()
