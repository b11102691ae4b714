"""Check a trained flashlane-tiny directory with transformers on the CPU.

    python tools/train_tiny/check_local.py models/flashlane-tiny [--count 1000] [--json out.json]

Loads tokenizer and model the way a user would (AutoTokenizer, Qwen3NextForCausalLM.from_pretrained),
reports missing / unexpected keys, the token cost of the counting reply, greedy-generates the answer
to "Count from 1 to N" through the chat template and checks every number is there in order, and
completes a Python function header."""

import argparse
import ast
import json
import sys
import time

import torch
from transformers import AutoTokenizer, Qwen3NextForCausalLM


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("model_dir")
    ap.add_argument("--count", type=int, default=1000)
    ap.add_argument("--json", default="")
    args = ap.parse_args()
    torch.manual_seed(0)
    res = {}

    tok = AutoTokenizer.from_pretrained(args.model_dir)
    msgs = [{"role": "user", "content": f"Count from 1 to {args.count}"}]
    prompt = tok.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert prompt == f"<|im_start|>user\nCount from 1 to {args.count}<|im_end|>\n<|im_start|>assistant\n", prompt
    reply = "\n".join(str(i) for i in range(1, args.count + 1))
    res["tokens"] = {"prompt": len(tok(prompt)["input_ids"]), "count_reply": len(tok(reply)["input_ids"]),
                     "1000": tok.tokenize("1000"), "eos_token": tok.eos_token, "vocab": len(tok)}
    print("tokenizer:", json.dumps(res["tokens"]))

    model, info = Qwen3NextForCausalLM.from_pretrained(args.model_dir, dtype=torch.float32, output_loading_info=True)
    model.eval()
    info = {k: sorted(v) if isinstance(v, (set, list)) else str(v) for k, v in info.items()}
    non_mtp_unexpected = [k for k in info.get("unexpected_keys", []) if not k.startswith("mtp.")]
    res["loading"] = {"missing": info.get("missing_keys", []), "unexpected_non_mtp": non_mtp_unexpected,
                      "mismatched": info.get("mismatched_keys", []),
                      "params": sum(p.numel() for p in model.parameters())}
    print("loading:", json.dumps(res["loading"]))
    ok = not res["loading"]["missing"] and not non_mtp_unexpected and not res["loading"]["mismatched"]

    eos = [tok.convert_tokens_to_ids("<|im_end|>"), tok.convert_tokens_to_ids("<|endoftext|>")]
    ids = tok(prompt, return_tensors="pt")["input_ids"]
    t = time.time()
    with torch.no_grad():
        out = model.generate(ids, max_new_tokens=res["tokens"]["count_reply"] + 64, do_sample=False,
                             eos_token_id=eos, pad_token_id=eos[1])
    gen = out[0, ids.shape[1]:]
    text = tok.decode(gen, skip_special_tokens=True)
    nums = [x.strip() for x in text.strip().split("\n")]
    want = [str(i) for i in range(1, args.count + 1)]
    res["count"] = {"n": args.count, "all_in_order": nums == want, "numbers_written": len(nums),
                    "generated_tokens": int(gen.shape[0]), "ended_with_im_end": int(gen[-1]) == eos[0],
                    "seconds": round(time.time() - t, 1), "head": text[:40], "tail": text[-40:],
                    "first_mismatch": next((i for i, (a, b) in enumerate(zip(nums, want)) if a != b), None)}
    print("count:", json.dumps(res["count"]))
    ok = ok and res["count"]["all_in_order"]

    res["code"] = {}
    for header in ["def is_prime(n):", "def average(numbers):", "def count_words(text):"]:
        p = tok.apply_chat_template([{"role": "user", "content": f"Complete this Python function:\n```python\n{header}\n```"}],
                                    add_generation_prompt=True, tokenize=False)
        x = tok(p, return_tensors="pt")["input_ids"]
        with torch.no_grad():
            o = model.generate(x, max_new_tokens=200, do_sample=False, eos_token_id=eos, pad_token_id=eos[1])
        txt = tok.decode(o[0, x.shape[1]:], skip_special_tokens=True)
        body = txt.split("```python\n", 1)[-1].split("```", 1)[0]
        try:
            ast.parse(body)
            parses = True
        except SyntaxError:
            parses = False
        res["code"][header] = {"reply": txt, "parses": parses}
        print(f"--- {header} (parses: {parses})\n{txt}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(res, f, indent=1)
    print("OK" if ok else "FAILED")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
