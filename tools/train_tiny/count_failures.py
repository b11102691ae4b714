#!/usr/bin/env python3
"""Sorts the counting failures of `eval_skills.py` evaluations by kind, per skill and temperature:
a wrong first number, a misread step at the second, a wrong number later, a stop written early
or late (or the right words with other spacing). Exact
where the evaluation kept each failure's `first_difference`; for older evaluations, read from
the shortened reply (its first 150 and last 250 characters, ' … ' between), a number wrong in
the part not kept is "wrong in the unkept middle".

    python3 tools/train_tiny/count_failures.py EVAL.json [EVAL.json.xz …]
"""
import json
import lzma
import sys

COUNT_SKILLS = ("count (2-60 numbers)", "count (61-400 numbers)")
# What eval_skills.py puts between the head and the tail of a long reply it shortens.
ELISION = " … "


def load(path: str) -> dict:
    opener = lzma.open if path.endswith(".xz") else open
    with opener(path, "rt") as f:
        return json.load(f)


def kind_of(failure: dict) -> str:
    d = failure.get("first_difference")
    if d is None:  # an evaluation from before eval_skills.py kept it
        return kind(failure["expected"], failure["reply"] or "")
    if d["expected"] is None and d["got"] is None:
        return "spacing only"
    if d["expected"] is None:
        return "late"
    if d["got"] is None:
        return "early"
    return {0: "1st number", 1: "2nd number"}.get(d["word"], "a later number")


def kind(expected: str, reply: str) -> str:
    want = expected.split()
    if ELISION in reply:
        head, tail = reply.split(ELISION, 1)
        # The head's last number and the tail's first may be cut in the middle.
        got, tail = head.split()[:-1], tail.split()[1:]
    else:
        got, tail = reply.split(), None
    first_wrong = next((i for i, (w, g) in enumerate(zip(want, got)) if w != g), None)
    if first_wrong is not None:
        return {0: "1st number", 1: "2nd number"}.get(first_wrong, "a later number")
    if tail is None:
        return "late" if len(got) > len(want) else "early"
    last = want[-1]
    if last in tail and tail.index(last) < len(tail) - 1:
        return "late"
    if tail and tail[-1] != last and all(x in want for x in tail):
        return "early"
    return "wrong in the unkept middle"


def main() -> None:
    for path in sys.argv[1:]:
        results = load(path)["results"]
        print(path)
        for skill in COUNT_SKILLS:
            for temperature, run in sorted(results[skill].items()):
                kinds: dict[str, int] = {}
                for failure in run["failures"]:
                    k = kind_of(failure)
                    kinds[k] = kinds.get(k, 0) + 1
                print(f"  {skill}, T = {temperature}: {len(run['failures'])} failed: {dict(sorted(kinds.items()))}")


if __name__ == "__main__":
    main()
