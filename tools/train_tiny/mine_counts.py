"""Finds the counts the default model gets wrong among the ones it may be trained on (issue 18).

Draws counts as eval_skills.py does (half of 2-60 numbers, half of 61-400) but from the trained
side of skills.py's split (`pick_trained`: never a held-out case), asks `flashlane serve` each at
temperature 0, and writes every case's features (length, step, direction, whether the end is off
the step's grid, the largest number's digits) with whether it was right, and each failure with its
prompt, numbers and first difference: what a training stage can replay (`train.py --replay`)
and what says which kinds of count are hard.

    python tools/train_tiny/mine_counts.py --flashlane target/release/flashlane \
        --model models/flashlane-tiny --cases 2000 --out /tmp/mined.json

Needs the `openai` client and `jinja2` (as eval_skills.py).
"""

import argparse
import json
import os
import random
import sys
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import count_failures  # noqa: E402
import eval_skills  # noqa: E402
import skills  # noqa: E402

# Another seed than eval_skills.py's sets (20261201, 20261203, 20261204): the draws differ, and
# none is held out whatever the seed.
MINE_SEED = 20261205


def features(q, nums):
    step = nums[1] - nums[0] if len(nums) > 1 else 0
    # The end the prompt names is the last number unless it is off the step's grid.
    named_end = [int(w) for w in q.replace(".", " ").replace(",", " ").replace("?", " ").split()
                 if w.lstrip("-").isdigit()]
    return {
        "numbers": len(nums),
        "step": abs(step),
        "down": step < 0,
        "off_grid": bool(named_end) and nums[-1] not in named_end,
        "digits": len(str(max(abs(v) for v in nums))),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--flashlane", help="the binary to start (else --url)")
    ap.add_argument("--model", help="the model directory it serves")
    ap.add_argument("--url", help="an already running server")
    ap.add_argument("--cases", type=int, default=2000)
    ap.add_argument("--seed", type=int, default=MINE_SEED)
    ap.add_argument("--out", required=True)
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="an argument for `flashlane serve` (repeat for several)")
    args = ap.parse_args()
    cases = skills.draw_counts(random.Random(args.seed), args.cases, skills.pick_trained)
    proc = None
    if args.flashlane:
        proc, url = eval_skills.start(args.flashlane, args.model, args.serve_arg)
    else:
        url = args.url
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", timeout=3600)
    t0 = time.time()

    def one(case):
        q, nums = case
        want = "\n".join(map(str, nums))
        reply, calls = eval_skills.ask(client, eval_skills.Case("count", eval_skills.user(q), None,
                                                                6 * len(nums) + 16), 0.0, 0)
        return reply.strip() == want and not calls, reply

    try:
        with ThreadPoolExecutor(eval_skills.WORKERS) as pool:
            results = list(pool.map(one, cases))
    finally:
        if proc:
            proc.kill()
    rows, failed = [], []
    for (q, nums), (right, reply) in zip(cases, results):
        f = features(q, nums)
        rows.append(dict(f, right=right))
        if not right:
            want = "\n".join(map(str, nums))
            d = eval_skills.first_difference(want, reply)
            failure = {"prompt": q, "numbers": nums, "first_difference": d, "features": f}
            failure["kind"] = count_failures.kind_of(failure)
            failed.append(failure)
    within = [r for r in rows if r["digits"] <= 4]
    summary = {
        "cases": len(rows),
        "right": sum(r["right"] for r in rows),
        "within_4_digits": len(within),
        "within_4_digits_right": sum(r["right"] for r in within),
        "failure_kinds": dict(Counter(f["kind"] for f in failed)),
        "seconds": round(time.time() - t0, 1),
    }
    with open(args.out, "w") as f:
        json.dump({"model": args.model, "seed": args.seed, "summary": summary, "cases": rows,
                   "failed": failed}, f, indent=1)
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
