"""Which of several screened stages counts best: prints the name whose eval_skills.py result
(DIR/skills_eval_NAME.json) has the most counts right within 4 digits at T = 0 and 0.7 together,
or `none` where no evaluation finished; the scores go to stderr. Device scripts use it to choose
the stage whose weights they bring back (the decision to ship stays with the CPU evaluation).

    python3 tools/train_tiny/better_stage.py DIR NAME [NAME ...]
"""

import json
import sys

# eval_skills.py's row of every count whose numbers have at most 4 digits (issue 18's goal).
ROW = "count, every number of up to 4 digits (both count rows)"


def score(path):
    try:
        with open(path) as f:
            r = json.load(f)["results"][ROW]
        return r["0.0"]["right"] + r["0.7"]["right"]
    except (OSError, KeyError, ValueError):
        return -1


def main():
    if len(sys.argv) < 3:
        sys.exit(__doc__)
    folder, names = sys.argv[1], sys.argv[2:]
    scores = {n: score(f"{folder}/skills_eval_{n}.json") for n in names}
    print(f"scores {scores}", file=sys.stderr)
    best = max(scores, key=scores.get)
    print(best if scores[best] >= 0 else "none")


if __name__ == "__main__":
    main()
