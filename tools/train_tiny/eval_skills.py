"""Evaluates the default model's skills (issue 18) through flashlane's OpenAI API.

Starts `flashlane serve` (the binary given, on 127.0.0.1 with an ephemeral port) with the model
directory given, asks every skill's held-out cases (see skills.py: what is held out is never
trained on) at temperature 0 and at 0.7 (seeded per case, so a run is repeatable), and writes the
success rates and every failure to a JSON file; prints a Markdown table.

    python tools/train_tiny/eval_skills.py --flashlane target/release/flashlane \
        --model models/flashlane-tiny --out models/flashlane-tiny/skills_eval.json

Needs the `openai` client, `jinja2` (skills.py renders nothing here, but imports cleanly) only;
on the GPU machine, which has no network, from the wheels `fetch_eval_wheels.sh` downloads.
"""

import argparse
import json
import os
import random
import re
import subprocess
import sys
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import openai

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import skills  # noqa: E402

EVAL_SEED = 20261201
# Concurrent requests: the server batches them; the replies do not depend on it (batch invariance).
WORKERS = 16
START_TIMEOUT_S = 120


# The subset of the counts within issue 18's goal ("up to 4 digits"): the held-out counts also
# start anywhere up to 30,000, so some run through 5-digit numbers.
WITHIN_4_DIGITS = "count, every number of up to 4 digits (both count rows)"


class Case:
    def __init__(self, skill, messages, check, max_tokens, tools=None, expect=None, also=()):
        self.skill, self.messages, self.check, self.max_tokens = skill, messages, check, max_tokens
        self.tools, self.expect = tools, expect
        # Summary rows besides `skill` that this case counts in (its failures are listed there).
        self.also = also


def user(q, system=None):
    return ([{"role": "system", "content": system}] if system else []) + [{"role": "user", "content": q}]


def exact(want):
    return lambda reply, calls: (reply.strip() == want and not calls)


def cases(n, seed=EVAL_SEED):
    rng = random.Random(seed)
    out = []
    # counting: half short (2-60 numbers), half long (61-400 numbers, and the engine's 1 to 1000)
    for i, (q, nums) in enumerate(skills.draw_counts(rng, n, skills.pick_held_out)):
        short = i < n // 2
        want = "\n".join(map(str, nums))
        also = (WITHIN_4_DIGITS,) if max(abs(v) for v in nums) <= 9999 else ()
        out.append(Case("count (2-60 numbers)" if short else "count (61-400 numbers)", user(q), exact(want),
                        6 * len(nums) + 16, expect=want, also=also))
    to_1000 = "\n".join(map(str, range(1, 1001)))
    out.append(Case("count (61-400 numbers)", user("Count from 1 to 1000."), exact(to_1000), 4000,
                    expect=to_1000, also=(WITHIN_4_DIGITS,)))
    for i in range(n):
        # a third each of sums, differences (held out of training) and products (all trained:
        # recall)
        want_op = "+-*"[i % 3]
        while True:
            op, a, b = skills.arith_case(rng)
            if op == want_op and (op == "*" or skills.held_out(skills.arith_key((op, a, b)))):
                break
        want = skills.arith_answer(op, a, b)
        out.append(Case("arith", user(rng.choice(skills.ARITH_PROMPTS[op]).format(a=a, b=b)), exact(want), 24,
                        expect=want))
    for _ in range(n):
        q, want = skills.word_task(rng, skills.word_list(rng))
        out.append(Case("words", user(q), exact(want), 64, expect=want))
    for _ in range(n):
        q, want = skills.calendar_case(rng)
        out.append(Case("calendar", user(q), exact(want), 96, expect=want))
    for _ in range(n):
        w = skills.pick_held_out(rng, lambda: rng.choice(skills.WORDS), lambda w: "spell:" + w)
        want = skills.spelled(w)
        out.append(Case("spell (held-out words)", user(rng.choice(skills.SPELL_PROMPTS).format(w=w)), exact(want), 32,
                        expect=want))
    # spelling is knowledge of each word's letters (a word is one or two tokens): the trained words
    # measure what was learnt, the held-out ones whether it carries over
    for _ in range(n):
        w = skills.pick_trained(rng, lambda: rng.choice(skills.WORDS), lambda w: "spell:" + w)
        want = skills.spelled(w)
        out.append(Case("spell (trained words)", user(rng.choice(skills.SPELL_PROMPTS).format(w=w)), exact(want), 32,
                        expect=want))
    for _ in range(n):
        q = skills.cannot_prompt(rng, skills.CANNOT_HELD_OUT)
        out.append(Case("cannot", user(q), lambda r, c: r.strip().startswith("Sorry, I can't") and not c, 64,
                        expect="Sorry, I can't …"))
    for _ in range(n):
        system, q, want = skills.pick_held_out(rng, lambda: skills.name_case(rng), lambda c: "name:" + c[0])
        out.append(Case("roles", user(q, system), exact(want), 16, expect=want))
    for _ in range(n):
        tools, q, name, args, _, _ = skills.tool_case(rng, held=True)

        def check(reply, calls, name=name, args=args):
            return (len(calls) == 1 and calls[0][0] == name and calls[0][1] == args)
        out.append(Case("tools", user(q), check, 96, tools=tools, expect={"name": name, "arguments": args}))
    return out


def ask(client, case, temperature, seed):
    kw = dict(model="m", messages=case.messages, max_tokens=case.max_tokens, temperature=temperature, seed=seed)
    if case.tools:
        kw["tools"] = case.tools
    r = client.chat.completions.create(**kw)
    m = r.choices[0].message
    calls = []
    for c in m.tool_calls or []:
        try:
            calls.append((c.function.name, json.loads(c.function.arguments)))
        except json.JSONDecodeError:
            calls.append((c.function.name, c.function.arguments))
    return m.content or "", calls


def start(binary, model, serve_args=()):
    cmd = [binary, "serve", "--host", "127.0.0.1", "--port", "0", "--served-model-name", "m", "--model", model,
           *serve_args]
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True)
    deadline = time.time() + START_TIMEOUT_S
    for line in proc.stderr:
        found = re.search(r"listening on (http://\S+)", line)
        if found:
            threading.Thread(target=lambda: [None for _ in proc.stderr], daemon=True).start()
            return proc, found.group(1)
        if time.time() > deadline:
            break
    proc.kill()
    raise RuntimeError("flashlane did not start: " + " ".join(cmd))


# A long reply is kept as its first and last characters with ELISION between (a count of 400
# numbers is 2 KB; the JSON is committed beside the model).
REPLY_HEAD, REPLY_TAIL, ELISION = 150, 250, " … "


def shorten(reply: str) -> str:
    if len(reply) <= REPLY_HEAD + REPLY_TAIL:
        return reply
    return reply[:REPLY_HEAD] + ELISION + reply[-REPLY_TAIL:]


def first_difference(expected: str, reply: str) -> dict:
    """Where the reply's words first leave the expected ones (a shortened reply hides it): both
    None when the words agree and only the spacing differs."""
    want, got = expected.split(), reply.split()
    at = next((i for i, (w, g) in enumerate(zip(want, got)) if w != g), min(len(want), len(got)))
    return {"word": at, "expected": want[at] if at < len(want) else None,
            "got": got[at] if at < len(got) else None, "expected_words": len(want), "reply_words": len(got)}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--flashlane", help="the binary to start (else --url)")
    ap.add_argument("--model", help="the model directory it serves")
    ap.add_argument("--url", help="an already running server")
    ap.add_argument("--cases", type=int, default=40, help="cases per skill")
    ap.add_argument("--out", required=True)
    ap.add_argument("--seed", type=int, default=EVAL_SEED,
                    help="draws the cases (another seed: another set of held-out cases, to confirm a choice "
                         "made on the default set)")
    ap.add_argument("--skills", default="",
                    help="comma-separated prefixes of the skills to ask (e.g. 'count'); default all")
    ap.add_argument("--serve-arg", action="append", default=[],
                    help="one more argument for `flashlane serve` (repeat it: --serve-arg=--device "
                         "--serve-arg=cuda screens a stage on the GPU machine; the shipped figures are the CPU's)")
    args = ap.parse_args()
    # Filtered before a server starts; each case keeps its place in the whole set, whose index
    # seeds its sampling, so a filtered run's replies are the whole run's.
    prefixes = tuple(p.strip() for p in args.skills.split(",") if p.strip())
    all_cases = list(enumerate(cases(args.cases, args.seed)))
    if prefixes:
        all_cases = [(i, c) for i, c in all_cases if c.skill.startswith(prefixes)]
    if not all_cases:
        ap.error(f"--skills {args.skills!r} matches no skill")
    proc = None
    if args.url:
        url = args.url
    else:
        proc, url = start(args.flashlane, args.model, args.serve_arg)
    client = openai.OpenAI(base_url=url + "/v1", api_key="none", max_retries=0, timeout=600)
    results = {}
    t0 = time.time()
    try:
        for temperature in (0.0, 0.7):
            def one(numbered):
                i, case = numbered
                reply, calls = ask(client, case, temperature, seed=i)
                return case, case.check(reply, calls), reply, calls
            with ThreadPoolExecutor(WORKERS) as pool:
                for case, ok, reply, calls in pool.map(one, all_cases):
                    for row in (case.skill, *case.also):
                        tally = results.setdefault(row, {}).setdefault(str(temperature),
                                                                       {"asked": 0, "right": 0, "failures": []})
                        tally["asked"] += 1
                        tally["right"] += int(ok)
                    r = results[case.skill][str(temperature)]
                    if not ok:
                        expect = shorten(case.expect) if isinstance(case.expect, str) else case.expect
                        r["failures"].append({"messages": case.messages[-1]["content"], "expected": expect,
                                              "reply": shorten(reply), "tool_calls": calls,
                                              "first_difference": first_difference(case.expect, reply)
                                              if isinstance(case.expect, str) else None})
    finally:
        if proc:
            proc.terminate()
            proc.wait(timeout=30)
    summary = {s: {t: round(100.0 * v["right"] / v["asked"], 1) for t, v in r.items()} for s, r in results.items()}
    with open(args.out, "w") as f:
        json.dump({"model": args.model, "serve_args": args.serve_arg, "seed": args.seed,
                   "skills": args.skills or "all", "cases_per_skill": args.cases,
                   "seconds": round(time.time() - t0, 1), "success_percent": summary, "results": results}, f, indent=1)
    print("| skill | cases | T = 0 | T = 0.7 |")
    print("|---|---|---|---|")
    for s, r in results.items():
        print(f"| {s} | {r['0.0']['asked']} | {summary[s]['0.0']} % | {summary[s]['0.7']} % |")


if __name__ == "__main__":
    main()
