"""The default model's skills (issue 18): synthetic conversations for training, and the held-out
cases the evaluation (`eval_skills.py`) asks.

Every generator is a pure function of its `random.Random`. What is held out of training is decided
by `held_out(key)`, a hash of the case, so training never sees an evaluation case and the
evaluation needs no list: arithmetic pairs, spelled words, count ranges, tool argument values and
names given in system messages are held out by their key; refusals and a few phrasings are held
out by keeping their templates in separate lists.

Conversations are rendered by the model's own chat template (`CHAT_TEMPLATE`, jinja2 with
transformers' `tojson`), so what the model is trained on is exactly what a server renders."""

import json
import math
import os
import re
import zlib

# ---------------------------------------------------------------- the chat template

# Qwen3's layout without its thinking rewrite: a system turn (the tools listed in it, Hermes style),
# then each message as `<|im_start|>{role}\n{content}<|im_end|>\n`; an assistant's calls as
# `<tool_call>` blocks; tool results gathered into one user turn of `<tool_response>` blocks.
# Without tools the rendering is the model's earlier plain ChatML, token for token. The template
# variable `enable_thinking` (a request's `chat_template_kwargs`) starts the reply inside `<think>`
# when true and closes an empty one when false (Qwen3's way of turning thinking off); unset, the
# model decides (it was trained without it, so training renders as before).
CHAT_TEMPLATE = (
    "{%- if tools %}"
    "{{- '<|im_start|>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n\\nYou may call one or more functions to assist with the user query.\\n\\n"
    "You are provided with function signatures within <tools></tools> XML tags:\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' }}{{- tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools>\\n\\nFor each function call, return a json object with function name and "
    "arguments within <tool_call></tool_call> XML tags:\\n<tool_call>\\n"
    "{\"name\": <function-name>, \"arguments\": <args-json-object>}\\n</tool_call><|im_end|>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0].content + '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.content is string %}{%- set content = message.content %}"
    "{%- else %}{%- set content = '' %}{%- endif %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'tool' %}"
    "{%- if loop.first or messages[loop.index0 - 1].role != 'tool' %}{{- '<|im_start|>user' }}{%- endif %}"
    "{{- '\\n<tool_response>\\n' + content + '\\n</tool_response>' }}"
    "{%- if loop.last or messages[loop.index0 + 1].role != 'tool' %}{{- '<|im_end|>\\n' }}{%- endif %}"
    "{%- else %}"
    "{{- '<|im_start|>' + message.role + '\\n' + content }}"
    "{%- if message.role == 'assistant' and message.tool_calls %}"
    "{%- for tool_call in message.tool_calls %}"
    "{%- if (loop.first and content) or not loop.first %}{{- '\\n' }}{%- endif %}"
    "{%- if tool_call.function %}{%- set tool_call = tool_call.function %}{%- endif %}"
    "{{- '<tool_call>\\n{\"name\": \"' + tool_call.name + '\", \"arguments\": ' }}"
    "{%- if tool_call.arguments is string %}{{- tool_call.arguments }}"
    "{%- else %}{{- tool_call.arguments | tojson }}{%- endif %}"
    "{{- '}\\n</tool_call>' }}"
    "{%- endfor %}"
    "{%- endif %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}"
    "{%- if enable_thinking is defined %}"
    "{%- if enable_thinking %}{{- '<think>\\n' }}{%- else %}{{- '<think>\\n\\n</think>\\n\\n' }}{%- endif %}"
    "{%- endif %}"
    "{%- endif %}"
)

_TEMPLATE = None


def render(messages, tools=None, add_generation_prompt=False):
    """The chat template applied as transformers applies it (jinja2, `tojson` = `json.dumps`
    with non-ASCII kept)."""
    global _TEMPLATE
    if _TEMPLATE is None:
        import jinja2

        env = jinja2.Environment(trim_blocks=True, lstrip_blocks=True)
        env.filters["tojson"] = lambda x: json.dumps(x, ensure_ascii=False)
        _TEMPLATE = env.from_string(CHAT_TEMPLATE)
    return _TEMPLATE.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt)


def conversation(turns, system=None, tools=None):
    """A whole conversation: `turns` are (user, assistant) pairs or message dicts."""
    msgs = [{"role": "system", "content": system}] if system else []
    for t in turns:
        if isinstance(t, dict):
            msgs.append(t)
        else:
            msgs.append({"role": "user", "content": t[0]})
            msgs.append({"role": "assistant", "content": t[1]})
    return render(msgs, tools)


# ---------------------------------------------------------------- held out

# One case in ten is held out of training for the evaluation.
HELD_OUT_EVERY = 10


def held_out(key):
    return zlib.crc32(key.encode()) % HELD_OUT_EVERY == 0


def pick_trained(rng, draw, key_of, tries=64):
    """A draw whose key is not held out (`draw()` until one is)."""
    for _ in range(tries):
        x = draw()
        if not held_out(key_of(x)):
            return x
    raise RuntimeError("no trainable draw in 64 tries")


def pick_held_out(rng, draw, key_of, tries=10_000):
    for _ in range(tries):
        x = draw()
        if held_out(key_of(x)):
            return x
    raise RuntimeError("no held-out draw")


with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "words.txt")) as _f:
    WORDS = [w for w in _f.read().split() if w]

# ---------------------------------------------------------------- counting

COUNT_PROMPTS = [
    "Count from {a} to {b}.", "Count from {a} to {b}", "count from {a} to {b}",
    "Please count from {a} to {b}.", "Can you count from {a} to {b}?",
    "Count from {a} to {b}, one number per line.", "List the numbers from {a} to {b}.",
    "Write the numbers from {a} to {b}.",
]
COUNT_TO_PROMPTS = ["Count to {b}.", "Count to {b}", "Please count to {b}.", "Count up to {b}."]
COUNT_STEP_PROMPTS = [
    "Count from {a} to {b} in steps of {s}.", "Count from {a} to {b} by {s}.",
    "Count from {a} to {b} in steps of {s}", "Count from {a} to {b} counting by {s}s.",
]
COUNT_DOWN_PROMPTS = ["Count down from {a} to {b}.", "Count backwards from {a} to {b}.",
                      "Count from {a} down to {b}."]
COUNT_DOWN_STEP_PROMPTS = ["Count down from {a} to {b} in steps of {s}.",
                           "Count backwards from {a} to {b} by {s}."]
STEPS = [2, 2, 3, 4, 5, 5, 10, 10, 20, 25, 50, 100, 7, 11, 6, 8, 9, 12, 15, 30]
# The counts asked of the default model: endpoints of up to four digits (a few of five, so that
# 9999 is not where numbers end), at most this many numbers (a 1,500-number count of four-digit
# numbers is ~7,500 tokens, inside the 8,192-token context).
COUNT_MAX_NUMBERS = 1500


def count_numbers(a, b, s):
    """The numbers of a count from `a` towards `b` in steps of `s` (sign of s = direction)."""
    return list(range(a, b + 1, s)) if s > 0 else list(range(a, b - 1, s))


# How often a count goes up by one, up in steps, down by one, down in steps (stages up to 4g).
# Stage 4g's held-out failures were mostly counts down that ran past their end and steps misread
# (by 7, 9, 11, 12, 15): `train.py --count-kinds` moves weight to those.
COUNT_KINDS = (0.55, 0.30, 0.10, 0.05)
# The share of stepped counts whose end is off the step's grid (`3 to 50 in steps of 4`: the
# last number is 47). Two of the shipped model's held-out failures at T = 0 write the first
# number past such an end (bench/RESULTS.md, "The default model's counting failures by
# kind"): `train.py --count-off-grid` raises it for a stage. The evaluation's held-out cases
# keep this value, so that their set does not move with a stage's training mix.
COUNT_OFF_GRID = 0.3


def count_case(rng, short, kinds=COUNT_KINDS, off_grid=COUNT_OFF_GRID):
    """(prompt, numbers) of a random count; `short` ones end within 60 numbers (many stops);
    `kinds` weighs up by one, up in steps, down by one and down in steps; `off_grid` is the
    share of stepped counts whose end is off the step's grid (the same draws whatever its
    value, so a case's numbers change only where its end moves off or onto the grid)."""
    n = rng.randint(1, 60) if short else int(10 ** rng.uniform(0.3, 3.18))
    n = min(n, COUNT_MAX_NUMBERS - 1)
    kind = rng.choices(range(4), weights=kinds)[0]
    if kind == 0:
        s = 1
    elif kind == 1:
        s = rng.choice(STEPS)
    elif kind == 2:
        s = -1
    else:
        s = -rng.choice(STEPS)
    span = abs(s) * n
    low = rng.choice([0, 1, 1, rng.randint(0, 100), rng.randint(0, 1000), rng.randint(0, 9999),
                      rng.randint(0, 9999), rng.randint(0, 30000)])
    if s > 0:
        a = low
        last = a + span
        b = last if (abs(s) == 1 or rng.random() < 1 - off_grid) else last + rng.randint(1, abs(s) - 1)
    else:
        b = low
        a = b + span if (abs(s) == 1 or rng.random() < 1 - off_grid) else b + span + rng.randint(1, abs(s) - 1)
    if s == 1:
        q = (rng.choice(COUNT_TO_PROMPTS).format(b=b) if a == 1 and rng.random() < 0.3
             else rng.choice(COUNT_PROMPTS).format(a=a, b=b))
    elif s > 1:
        q = rng.choice(COUNT_STEP_PROMPTS).format(a=a, b=b, s=s)
    elif s == -1:
        q = rng.choice(COUNT_DOWN_PROMPTS).format(a=a, b=b)
    else:
        q = rng.choice(COUNT_DOWN_STEP_PROMPTS).format(a=a, b=b, s=-s)
    return q, count_numbers(a, b, s)


def count_key(q):
    return "count:" + q.lower().rstrip(".?")


def gen_count(rng, short_frac=0.5, kinds=COUNT_KINDS, off_grid=COUNT_OFF_GRID):
    r = rng.random()
    if r < 0.06:
        # the acceptance task of the engine's tests and benchmarks
        b = rng.choice([1000, 1000, 600, 400, 300, 60, 50, 20])
        q, nums = rng.choice(COUNT_PROMPTS).format(a=1, b=b), list(range(1, b + 1))
    else:
        short = r < short_frac
        q, nums = pick_trained(rng, lambda: count_case(rng, short, kinds, off_grid),
                               lambda c: count_key(c[0]))
    return conversation([(q, "\n".join(map(str, nums)))], maybe_system(rng))


def draw_counts(rng, n, pick):
    """n counts as the evaluation asks them, half of 2-60 numbers and half of 61-400, each drawn by
    `pick` (`pick_held_out` for eval_skills.py's sets, `pick_trained` for mine_counts.py's)."""
    out = []
    for i in range(n):
        short = i < n // 2
        while True:
            q, nums = pick(rng, lambda: count_case(rng, short), lambda c: count_key(c[0]))
            if short or 60 < len(nums) <= 400:
                break
        out.append((q, nums))
    return out


def count_ends(q):
    """(a, b) a count prompt names: its first two numbers (every template names the start before
    the end), or (1, b) for "Count to {b}." prompts."""
    named = [int(w) for w in re.findall(r"-?\d+", q)]
    return (named[0], named[1]) if len(named) >= 2 else (1, named[0])


def count_prompt(rng, a, b, s):
    """A prompt of the templates `count_case` draws for a count from a to b by s (sign of s =
    direction)."""
    if s == 1:
        return (rng.choice(COUNT_TO_PROMPTS).format(b=b) if a == 1 and rng.random() < 0.3
                else rng.choice(COUNT_PROMPTS).format(a=a, b=b))
    if s > 1:
        return rng.choice(COUNT_STEP_PROMPTS).format(a=a, b=b, s=s)
    if s == -1:
        return rng.choice(COUNT_DOWN_PROMPTS).format(a=a, b=b)
    return rng.choice(COUNT_DOWN_STEP_PROMPTS).format(a=a, b=b, s=-s)


def count_near(rng, q, nums):
    """A count like the one asked by `q` (numbers `nums`): the same step and direction, the same
    distance from its last number to the end it names (0 on the step's grid), a start of as many
    digits, and within a quarter of as many numbers; never a held-out case. For a training stage
    to practise the kind of count a model got wrong rather than the case itself
    (`gen_count_replay`)."""
    s = nums[1] - nums[0] if len(nums) > 1 else 1
    _, b = count_ends(q)
    past_last = b - nums[-1]  # 0, or between the last number and the next, on its side
    digits = len(str(abs(nums[0])))
    for _ in range(64):
        n = max(2, min(COUNT_MAX_NUMBERS - 1, round(len(nums) * rng.uniform(0.8, 1.25))))
        low = 0 if digits == 1 else 10 ** (digits - 1)
        a = rng.randint(low, 10 ** digits - 1)
        if s < 0:
            # a count down must not pass 0 (the trained counts never do): a start above the
            # least that keeps its end at 0 or more, of as many digits where there is room
            least = (n - 1) * -s - past_last
            if a < least:
                a = rng.randint(least, max(least, 10 ** digits - 1))
        last = a + (n - 1) * s
        b = last + past_last
        q2 = count_prompt(rng, a, b, s)
        if not held_out(count_key(q2)):
            return q2, count_numbers(a, b, s)
    raise RuntimeError("no trainable count near " + q)


# A count whose step brings back the end's last two digits within this many numbers (steps of
# 20, 25, 50, 100: every 5th, 4th, 2nd or every number) has them everywhere on its grid, so
# sharing them does not make a number look like the end there.
DISTRACTOR_LAST_TWO_MIN_PERIOD = 6


def count_distractor(n, b, step=1):
    """Whether `n`, a number a count by `step` writes, looks like its end `b` without being it: as
    many digits, and the same last two (unless the step's grid repeats them within
    DISTRACTOR_LAST_TWO_MIN_PERIOD numbers), or the same digits in another order, or one digit
    different. The shipped model's held-out counts at T = 0 that stopped early, far from their
    end, stopped mostly at such numbers (session 65: 5299 for 5399, 10701 for 10710, 5548 for
    5558): the stop decision reads the end's digits, not its value."""
    sn, sb = str(n), str(b)
    if n == b or len(sn) != len(sb) or len(sb) < 2:
        return False  # a one-digit end: every number before it differs in one digit
    last_two = len(sb) >= 3 and 100 // math.gcd(abs(step), 100) >= DISTRACTOR_LAST_TWO_MIN_PERIOD
    return ((last_two and sn[-2:] == sb[-2:]) or sorted(sn) == sorted(sb)
            or sum(x != y for x, y in zip(sn, sb)) == 1)


def count_turns(ids, user_opening, opening, im_end, newline, digit_of):
    """The counts of a tokenised chat: for each assistant turn (after `opening`) whose lines are
    numbers and whose first number is the first number of the user turn before it, (end, lines):
    the end the user turn names (`count_ends`' rule: its second number, or its only one) and each
    line's number with the place of the token after it (the newline of a go-on, `im_end` of the
    stop, or wherever the row was cut). `digit_of` maps a digit's token id to its value (a digit
    is one token)."""

    def starts(seq):
        n, head = len(seq), seq[0]
        return [i + n for i, t in enumerate(ids) if t == head and ids[i:i + n] == seq]

    def digit_runs(lo, hi):
        runs, p = [], lo
        while p < hi:
            if ids[p] in digit_of:
                q = p
                while q < hi and ids[q] in digit_of:
                    q += 1
                runs.append((p, q))
                p = q
            else:
                p += 1
        return runs

    def value(p, q):
        v = 0
        for t in ids[p:q]:
            v = 10 * v + digit_of[t]
        return v

    ids = list(ids)
    users = starts(user_opening)
    out = []
    for a in starts(opening):
        before = [u for u in users if u < a]
        if not before:
            continue
        u = before[-1]
        end = ids.index(im_end, u) if im_end in ids[u:a] else a
        named = [value(p, q) for p, q in digit_runs(u, end)]
        if not named:
            continue
        first, bound = (named[0], named[1]) if len(named) >= 2 else (1, named[0])
        p, lines = a, []
        while p < len(ids) and ids[p] in digit_of:
            q = p
            while q < len(ids) and ids[q] in digit_of:
                q += 1
            lines.append((value(p, q), q))
            if q < len(ids) and ids[q] == newline and q + 1 < len(ids) and ids[q + 1] in digit_of:
                p = q + 1
            else:
                break
        if len(lines) >= 2 and lines[0][0] == first:
            out.append((bound, lines))
    return out


def distractor_decisions(turns, clear):
    """The places (indices into the chat's ids) of its counts' go-on decisions after their
    distractors (`count_distractor`), of `count_turns`' counts: the newline after each number
    that looks like its count's end, but for the last `clear` go-ons (train.py's near-stop
    window weighs those, and their numbers are next to the end, which is not what misleads)."""
    out = []
    for bound, lines in turns:
        step = lines[1][0] - lines[0][0]
        out += [q for n, q in lines[:max(0, len(lines) - 1 - clear)] if count_distractor(n, bound, step)]
    return out


def off_grid_end_decisions(turns, ids, im_end):
    """The places of the two decisions that end a count whose end is off its step's grid (its
    last number is not the end it was asked: 478 to 784 by 7 ends at 779), of `count_turns`'
    counts of `ids`: the go-on after the number before the last (the next one, 779, is still
    within the end) and the stop after the last (the next, 786, would pass it). Of the shipped
    model's held-out counts at T = 0, 15 of the 57 failures went past such an end (session 65,
    bench/RESULTS.md): the comparison of the next number with the end is where it goes wrong."""
    out = []
    for bound, lines in turns:
        (_, go_on), (last, stop) = lines[-2], lines[-1]
        if last != bound and stop < len(ids) and ids[stop] == im_end:
            out += [go_on, stop]
    return out


def load_mined(path):
    """The failed counts of a `mine_counts.py` file as (prompt, numbers), held-out cases (none,
    as it draws them) left out."""
    with open(path) as f:
        failed = json.load(f)["failed"]
    return [(c["prompt"], c["numbers"]) for c in failed if not held_out(count_key(c["prompt"]))]


def gen_count_replay(rng, mined, near_frac=0.5):
    """A count a model got wrong (`mine_counts.py`): with probability `near_frac` one like it
    (`count_near`), else the case itself."""
    q, nums = rng.choice(mined)
    if rng.random() < near_frac:
        q, nums = count_near(rng, q, nums)
    return conversation([(q, "\n".join(map(str, nums)))], maybe_system(rng))


# ---------------------------------------------------------------- arithmetic

ARITH_PROMPTS = {
    "+": ["What is {a} + {b}?", "What is {a} plus {b}?", "Add {a} and {b}.", "Compute {a} + {b}.",
          "{a} + {b} = ?", "Calculate {a} + {b}."],
    "-": ["What is {a} - {b}?", "What is {a} minus {b}?", "Subtract {b} from {a}.", "Compute {a} - {b}.",
          "{a} - {b} = ?", "Calculate {a} - {b}."],
    "*": ["What is {a} * {b}?", "What is {a} times {b}?", "Multiply {a} by {b}.", "Compute {a} x {b}.",
          "{a} * {b} = ?", "Calculate {a} * {b}."],
}
# Small numbers: sums and differences of 0..99 (differences not negative), products of 0..12.
ARITH_MAX = {"+": 99, "-": 99, "*": 12}


def arith_case(rng):
    op = rng.choice("++--*")
    a, b = rng.randint(0, ARITH_MAX[op]), rng.randint(0, ARITH_MAX[op])
    if op == "-" and b > a:
        a, b = b, a
    return op, a, b


def arith_key(c):
    op, a, b = c
    # products are 169 facts to be known, not a rule to generalise: none is held out
    return "arith:none" if op == "*" else f"arith:{op}{a},{b}"


def arith_answer(op, a, b):
    r = a + b if op == "+" else a - b if op == "-" else a * b
    return f"{a} {'x' if op == '*' else op} {b} = {r}."


def gen_arith(rng):
    op, a, b = pick_trained(rng, lambda: arith_case(rng), arith_key)
    q = rng.choice(ARITH_PROMPTS[op]).format(a=a, b=b)
    return conversation([(q, arith_answer(op, a, b))], maybe_system(rng))


# ---------------------------------------------------------------- word lists

def word_list(rng):
    return [rng.choice(WORDS) for _ in range(rng.randint(2, 8))]


def word_task(rng, words):
    """(prompt, reply) repeating or reversing a word list, comma- or space-separated."""
    sep = rng.choice([", ", " "])
    shown = sep.join(words)
    if rng.random() < 0.5:
        q = rng.choice(["Repeat these words: {w}", "Repeat after me: {w}", "Say these words back: {w}",
                        "Repeat this list: {w}"]).format(w=shown)
        return q, shown
    q = rng.choice(["Reverse these words: {w}", "Reverse the order of these words: {w}",
                    "Say these words in reverse order: {w}", "Reverse this list: {w}"]).format(w=shown)
    return q, sep.join(reversed(words))


def gen_words(rng):
    return conversation([word_task(rng, word_list(rng))], maybe_system(rng))


# ---------------------------------------------------------------- days and months

MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def calendar_case(rng):
    """(prompt, reply) about the days of the week or the months of the year."""
    names, what = (DAYS, "day") if rng.random() < 0.5 else (MONTHS, "month")
    whole = "the days of the week" if what == "day" else "the months of the year"
    r = rng.randrange(6)
    if r == 0:
        q = rng.choice(["List {x}.", "Name {x}.", "What are {x}?", "Write {x}, one per line."]).format(x=whole)
        return q, "\n".join(names)
    if r == 1:
        i = rng.randrange(len(names))
        return (rng.choice(["What {w} comes after {n}?", "Which {w} follows {n}?"]).format(w=what, n=names[i]),
                names[(i + 1) % len(names)] + ".")
    if r == 2:
        i = rng.randrange(len(names))
        return (rng.choice(["What {w} comes before {n}?", "Which {w} is before {n}?"]).format(w=what, n=names[i]),
                names[i - 1] + ".")
    if r == 3:
        i, j = sorted(rng.sample(range(len(names)), 2))
        return (rng.choice(["List the {w}s from {a} to {b}.", "Name the {w}s from {a} to {b}."])
                .format(w=what, a=names[i], b=names[j]), "\n".join(names[i:j + 1]))
    if r == 4:
        return (f"How many {what}s are in a {'week' if what == 'day' else 'year'}?",
                f"There are {len(names)} {what}s in a {'week' if what == 'day' else 'year'}.")
    i = rng.randrange(len(names))
    return (f"Which {what} is number {i + 1}?" if rng.random() < 0.5 else f"What is the {ordinal(i + 1)} {what}?",
            names[i] + ".")


def ordinal(n):
    return {1: "first", 2: "second", 3: "third", 4: "fourth", 5: "fifth", 6: "sixth", 7: "seventh",
            8: "eighth", 9: "ninth", 10: "tenth", 11: "eleventh", 12: "twelfth"}[n]


def gen_calendar(rng):
    return conversation([calendar_case(rng)], maybe_system(rng))


# ---------------------------------------------------------------- spelling

SPELL_PROMPTS = ["Spell the word {w}.", "How do you spell {w}?", "Spell {w}.", "Spell \"{w}\".",
                 "Spell {w} letter by letter."]


def spelled(w):
    return "-".join(w)


def gen_spell(rng):
    w = pick_trained(rng, lambda: rng.choice(WORDS), lambda w: "spell:" + w)
    return conversation([(rng.choice(SPELL_PROMPTS).format(w=w), spelled(w))], maybe_system(rng))


# ---------------------------------------------------------------- what it cannot do

CANNOT = ("Sorry, I can't help with that. I am a small model: I can count, do small sums, repeat or "
          "reverse words, spell words, list days and months, and call the tools you give me.")
TOPICS = ["the ocean", "love", "space travel", "the French revolution", "climate change", "cats",
          "democracy", "quantum physics", "the stock market", "ancient Rome", "football", "music",
          "friendship", "the moon landing", "photosynthesis", "the internet", "dinosaurs", "coffee",
          "volcanoes", "chess", "machine learning", "the human brain", "electric cars", "jazz",
          "the Renaissance", "black holes", "gardening", "the Olympics", "vaccines", "pirates"]
COUNTRIES = ["France", "Japan", "Brazil", "Canada", "Kenya", "Norway", "India", "Mexico", "Egypt",
             "Australia", "Germany", "Chile", "Vietnam", "Spain", "Peru", "Italy", "Ghana", "Poland"]
LANGUAGES = ["French", "German", "Spanish", "Japanese", "Italian", "Chinese", "Russian", "Portuguese"]
PHRASES = ["good morning", "where is the station", "I like tea", "see you tomorrow", "thank you very much",
           "the weather is nice", "how much does it cost", "happy birthday"]
# Templates of requests outside the model's skills; the evaluation asks only the held-out list.
CANNOT_TRAIN = [
    "Write a poem about {t}.", "Tell me a joke about {t}.", "Explain {t}.", "Write an essay on {t}.",
    "What is the capital of {c}?", "Translate \"{p}\" into {l}.", "Summarize the history of {t}.",
    "Give me advice about {t}.", "What do you think about {t}?", "Write a story about {t}.",
    "Who is the president of {c}?", "What is the population of {c}?", "Recommend a book about {t}.",
    "Describe {t} in detail.", "What is the weather like today?", "What time is it?",
    "Write a song about {t}.", "Why is {t} important?", "Plan a trip to {c}.",
    "What language do people speak in {c}?", "Draw a picture of {t}.", "Compose an email about {t}.",
]
CANNOT_HELD_OUT = [
    "Write a haiku about {t}.", "Can you teach me about {t}?", "What is the national dish of {c}?",
    "How do I say \"{p}\" in {l}?", "Give me three facts about {t}.", "Debate the pros and cons of {t}.",
    "What is the best hotel in {c}?", "Write a limerick about {t}.",
]


def cannot_prompt(rng, templates):
    return rng.choice(templates).format(t=rng.choice(TOPICS), c=rng.choice(COUNTRIES),
                                        p=rng.choice(PHRASES), l=rng.choice(LANGUAGES))


def gen_cannot(rng):
    return conversation([(cannot_prompt(rng, CANNOT_TRAIN), CANNOT)], maybe_system(rng))


# ---------------------------------------------------------------- roles and small talk

NAMES = ["Ada", "Max", "Luna", "Otto", "Nova", "Iris", "Leo", "Mira", "Finn", "Zoe", "Kai", "Ruby",
         "Hugo", "Nina", "Theo", "Lena", "Oscar", "Ella", "Felix", "Maya", "Jonas", "Clara", "Emil",
         "Sofia", "Paul", "Alma", "Noah", "Vera", "Liam", "Ida", "Arlo", "June", "Elias", "Rosa",
         "Milo", "Hazel", "Ezra", "Greta", "Axel", "Freya", "Bruno", "Lotte", "Igor", "Wanda", "Pablo",
         "Yara", "Sami", "Tara", "Quinn", "Edda", "Boris", "Cleo", "Dario", "Esme", "Gus", "Hana"]
IDENTITY = ("I am flashlane-tiny, a small language model. I can count, do small sums, repeat or "
            "reverse words, spell words, list days and months, and call tools.")
SMALL_TALK = [
    (["Hello", "Hi", "Hello!", "Hi there", "Hey"], "Hello! How can I help you today?"),
    (["Who are you?", "What is your name?", "Introduce yourself."], IDENTITY),
    (["What can you do?", "Help"],
     "I can count from one number to another (in steps, up or down), add, subtract and multiply small "
     "numbers, repeat or reverse a list of words, spell a word, list the days and months, and call the "
     "tools you give me."),
    (["Thank you", "Thanks!", "thanks"], "You're welcome!"),
    (["Goodbye", "Bye"], "Goodbye!"),
    (["How are you?"], "I am fine, thank you. How can I help?"),
]


def name_case(rng):
    """(system, prompt, reply): the name a system message gives the assistant."""
    name = rng.choice(NAMES)
    system = rng.choice(["Your name is {n}.", "You are {n}, a helpful assistant.", "You are called {n}."]).format(n=name)
    q = rng.choice(["Who are you?", "What is your name?", "What's your name?", "Introduce yourself."])
    return system, q, f"I am {name}."


def maybe_system(rng):
    r = rng.random()
    if r < 0.85:
        return None
    return rng.choice(["You are a helpful assistant.", "You are flashlane-tiny, a small helpful model.",
                       "Answer briefly."])


def gen_roles(rng):
    r = rng.random()
    if r < 0.45:
        system, q, a = pick_trained(rng, lambda: name_case(rng), lambda c: "name:" + c[0])
        turns = [(q, a)]
        if rng.random() < 0.3:
            turns.insert(0, calendar_case(rng))
        return conversation(turns, system)
    if r < 0.75:
        qs, a = rng.choice(SMALL_TALK)
        return conversation([(rng.choice(qs), a)], maybe_system(rng))
    # several turns: each answer depends only on its own question, the model must find the last
    turns = []
    for _ in range(rng.randint(2, 4)):
        g = rng.randrange(5)
        if g == 0:
            op, a, b = pick_trained(rng, lambda: arith_case(rng), arith_key)
            turns.append((rng.choice(ARITH_PROMPTS[op]).format(a=a, b=b), arith_answer(op, a, b)))
        elif g == 1:
            turns.append(word_task(rng, word_list(rng)))
        elif g == 2:
            turns.append(calendar_case(rng))
        elif g == 3:
            q, nums = pick_trained(rng, lambda: count_case(rng, True), lambda c: count_key(c[0]))
            turns.append((q, "\n".join(map(str, nums))))
        else:
            turns.append((cannot_prompt(rng, CANNOT_TRAIN), CANNOT))
    return conversation(turns, maybe_system(rng))


# ---------------------------------------------------------------- tools

CITIES = ["Paris", "London", "Tokyo", "Berlin", "Madrid", "Rome", "Oslo", "Cairo", "Lima", "Sydney",
          "Toronto", "Chicago", "Boston", "Seattle", "Denver", "Dublin", "Vienna", "Prague", "Warsaw",
          "Athens", "Lisbon", "Moscow", "Beijing", "Seoul", "Delhi", "Mumbai", "Bangkok", "Manila",
          "Jakarta", "Nairobi", "Lagos", "Accra", "Dakar", "Tunis", "Zurich", "Geneva", "Munich",
          "Hamburg", "Milan", "Naples", "Porto", "Seville", "Helsinki", "Stockholm", "Copenhagen",
          "Riga", "Tallinn", "Vilnius", "Kyiv", "Istanbul", "Dubai", "Doha", "Tehran", "Karachi",
          "Dhaka", "Hanoi", "Osaka", "Kyoto", "Auckland", "Perth", "Havana", "Bogota", "Quito",
          "Santiago", "Montreal", "Vancouver", "Miami", "Dallas", "Austin", "Phoenix", "Atlanta",
          "Houston", "Detroit", "Portland", "Calgary", "Budapest", "Bucharest", "Sofia", "Belgrade"]
CONDITIONS = ["sunny", "cloudy", "rainy", "windy", "snowy", "foggy", "clear"]
SYMBOLS = ["ACME", "NVDA", "ABC", "XYZ", "GLOB", "TECH", "FOOD", "BANK", "AUTO", "SOLR", "MINE", "SHIP"]
CURRENCIES = ["USD", "EUR", "GBP", "JPY", "CHF", "CAD", "AUD", "SEK", "NOK", "INR"]


def fn(name, description, props, required=None):
    return {"type": "function", "function": {
        "name": name, "description": description,
        "parameters": {"type": "object",
                       "properties": {k: ({"type": t, "description": d}) for k, (t, d) in props.items()},
                       "required": required if required is not None else list(props)}}}


def tool_weather(rng, held):
    city = choose(rng, CITIES, "city", held)
    q = rng.choice(["What's the weather in {c}?", "What is the weather like in {c}?", "Is it raining in {c}?",
                    "How warm is it in {c} today?", "Weather in {c}?"]).format(c=city)
    t, cond = rng.randint(-10, 38), rng.choice(CONDITIONS)
    return (fn("get_weather", "Get the current weather in a city.", {"city": ("string", "The city name")}),
            q, {"city": city}, {"temperature": t, "condition": cond}, f"It is {cond} in {city}, {t} degrees.")


def tool_time(rng, held):
    city = choose(rng, CITIES, "city", held)
    q = rng.choice(["What time is it in {c}?", "What's the local time in {c}?", "Tell me the time in {c}."]).format(c=city)
    hm = f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}"
    return (fn("get_time", "Get the current local time in a city.", {"city": ("string", "The city name")}),
            q, {"city": city}, {"time": hm}, f"It is {hm} in {city}.")


def tool_stock(rng, held):
    sym = choose(rng, SYMBOLS, "symbol", held)
    q = rng.choice(["What is the stock price of {s}?", "How much is {s} trading at?", "Price of {s} stock?"]).format(s=sym)
    p = f"{rng.randint(1, 900)}.{rng.randint(0, 99):02d}"
    return (fn("get_stock_price", "Get the latest price of a stock.", {"symbol": ("string", "The ticker symbol")}),
            q, {"symbol": sym}, {"price": float(p)}, f"{sym} is trading at {float(p)}.")


def tool_currency(rng, held):
    amount = rng.choice([1, 5, 10, 20, 50, 100, 250, 1000, rng.randint(1, 999)])
    src, dst = rng.sample(CURRENCIES, 2)
    q = rng.choice(["Convert {a} {s} to {d}.", "How much is {a} {s} in {d}?", "What is {a} {s} in {d}?"]).format(a=amount, s=src, d=dst)
    r = round(amount * rng.uniform(0.1, 2.0), 2)
    return (fn("convert_currency", "Convert an amount of money from one currency to another.",
               {"amount": ("number", "The amount"), "from_currency": ("string", "Currency code to convert from"),
                "to_currency": ("string", "Currency code to convert to")}),
            q, {"amount": amount, "from_currency": src, "to_currency": dst}, {"result": r},
            f"{amount} {src} is {r} {dst}.")


def tool_translate(rng, held):
    text, lang = rng.choice(PHRASES), rng.choice(LANGUAGES)
    q = rng.choice(["Translate \"{p}\" into {l}.", "Translate \"{p}\" to {l}."]).format(p=text, l=lang)
    out = " ".join(rng.choice(WORDS) for _ in range(len(text.split())))
    return (fn("translate", "Translate a text into another language.",
               {"text": ("string", "The text to translate"), "language": ("string", "The target language")}),
            q, {"text": text, "language": lang}, {"translation": out}, f"In {lang}: {out}")


def tool_timer(rng, held):
    m = rng.randint(1, 120)
    q = rng.choice(["Set a timer for {m} minutes.", "Start a {m} minute timer.", "Remind me in {m} minutes."]).format(m=m)
    return (fn("set_timer", "Start a countdown timer.", {"minutes": ("integer", "Length of the timer in minutes")}),
            q, {"minutes": m}, {"status": "started"}, f"Your {m} minute timer has started.")


def tool_search(rng, held):
    topic = rng.choice(TOPICS)
    q = rng.choice(["Search the web for {t}.", "Look up {t} online.", "Find articles about {t}."]).format(t=topic)
    title = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5))).capitalize()
    return (fn("search_web", "Search the web and return the top result.", {"query": ("string", "What to search for")}),
            q, {"query": topic}, {"title": title}, f"The top result is \"{title}\".")


def tool_email(rng, held):
    name = choose(rng, NAMES, "name", held)
    topic = rng.choice(TOPICS)
    q = rng.choice(["Send an email to {n} about {t}.", "Email {n} about {t}.", "Write to {n} about {t}."]).format(n=name, t=topic)
    return (fn("send_email", "Send an email.", {"to": ("string", "The recipient's name"),
                                               "subject": ("string", "The subject of the email")}),
            q, {"to": name, "subject": topic}, {"status": "sent"}, f"The email to {name} has been sent.")


# Generic lookups: a tool named after a thing, one argument; the model must read the name.
THINGS = ["book", "movie", "song", "recipe", "planet", "restaurant", "product", "airport", "museum",
          "hotel", "train", "player", "team", "company", "park", "river", "mountain", "language",
          "car", "game", "flower", "bird", "drug", "course", "event"]


def tool_lookup(rng, held):
    thing = choose(rng, THINGS, "thing", held)
    value = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 2))).title()
    name = rng.choice(["get_{t}_info", "find_{t}", "lookup_{t}", "{t}_details"]).format(t=thing)
    q = rng.choice(["Find the {t} called {v}.", "Get information about the {t} {v}.", "Look up the {t} named {v}.",
                    "Tell me about the {t} {v}."]).format(t=thing, v=value)
    info = " ".join(rng.choice(WORDS) for _ in range(rng.randint(2, 5)))
    return (fn(name, f"Look up a {thing} by its name.", {"name": ("string", f"The name of the {thing}")}),
            q, {"name": value}, {"summary": info}, f"{value}: {info}.")


TOOL_KINDS = [tool_weather, tool_time, tool_stock, tool_currency, tool_translate, tool_timer, tool_search,
              tool_email, tool_lookup, tool_lookup]


def choose(rng, values, what, held):
    """A value for a tool argument: trained ones for training; held-out ones for the evaluation
    where the list has any (a list too short to hold one out, such as the symbols, gives any)."""
    key = lambda v: f"{what}:{v}"  # noqa: E731
    if held and any(held_out(key(v)) for v in values):
        return pick_held_out(rng, lambda: rng.choice(values), key)
    return pick_trained(rng, lambda: rng.choice(values), key) if not held else rng.choice(values)


def tool_case(rng, held=False):
    """(tools, question, call name, arguments, result, answer): one of 1–4 offered tools is needed."""
    kinds = rng.sample(TOOL_KINDS, rng.randint(1, 4))
    made = [k(rng, held) for k in kinds]
    # distinct function names (two lookups can draw the same thing)
    seen, offered = set(), []
    for m in made:
        if m[0]["function"]["name"] not in seen:
            seen.add(m[0]["function"]["name"])
            offered.append(m)
    tool, q, args, result, answer = offered[rng.randrange(len(offered))]
    return [m[0] for m in offered], q, tool["function"]["name"], args, result, answer


def gen_tools(rng):
    r = rng.random()
    system = maybe_system(rng)
    if r < 0.8:
        tools, q, name, args, result, answer = tool_case(rng)
        call = {"role": "assistant", "content": "",
                "tool_calls": [{"type": "function", "function": {"name": name, "arguments": args}}]}
        msgs = [{"role": "user", "content": q}, call]
        if rng.random() < 0.6:
            msgs.append({"role": "tool", "content": json.dumps(result)})
            msgs.append({"role": "assistant", "content": answer})
        return conversation(msgs, system, tools)
    # tools offered but none needed: in-skill requests are answered, the rest declined
    tools = tool_case(rng)[0]
    g = rng.randrange(3)
    if g == 0:
        op, a, b = pick_trained(rng, lambda: arith_case(rng), arith_key)
        turn = (rng.choice(ARITH_PROMPTS[op]).format(a=a, b=b), arith_answer(op, a, b))
    elif g == 1:
        q, nums = pick_trained(rng, lambda: count_case(rng, True), lambda c: count_key(c[0]))
        turn = (q, "\n".join(map(str, nums)))
    else:
        turn = (rng.choice(["Write a poem about {t}.", "Tell me a joke about {t}.", "Explain {t}."])
                .format(t=rng.choice(TOPICS)), CANNOT)
    return conversation([turn], system, tools)


SKILL_KINDS = {
    "count": gen_count,
    "arith": gen_arith,
    "words": gen_words,
    "calendar": gen_calendar,
    "spell": gen_spell,
    "cannot": gen_cannot,
    "roles": gen_roles,
    "tools": gen_tools,
}
