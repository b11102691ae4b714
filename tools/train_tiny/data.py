"""Data for flashlane-tiny: a Python-source corpus from permissively licensed installed packages,
synthetic ChatML conversations, and the byte-level BPE tokenizer.

Everything is a pure function of a seed (and of the packages installed on the machine)."""

import ast
import importlib.metadata as md
import json
import os
import random
import re
import textwrap

import skills

SPECIALS = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>", "</think>"]
# Qwen2-style split, with `\p{N}` isolating single digits so that every number tokenizes as its
# digits: counting is then a digit-level copy-and-increment, which a tiny model learns.
PRETOKENIZE_REGEX = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
    r"|\s*[\r\n]+|\s+(?!\S)|\s+"
)
# The chat template (with tools since issue 18; without tools it renders the plain ChatML of the
# first model token for token).
CHAT_TEMPLATE = skills.CHAT_TEMPLATE

# ---------------------------------------------------------------- Python corpus

# Candidate distributions; each one's licence metadata is checked at run time and only permissive
# ones are used. Vendored folders are skipped (their code may carry other licences).
CANDIDATES = [
    "numpy", "scipy", "pandas", "sympy", "scikit-learn", "networkx", "torch", "transformers",
    "statsmodels", "scikit-image", "mpmath", "jinja2", "click", "rich", "attrs", "six", "packaging",
    "pyparsing", "python-dateutil", "markdown", "pygments", "toolz", "cloudpickle", "fsspec",
    "xarray", "einops", "tabulate", "pytest", "numba", "h5py", "httpx", "werkzeug", "requests",
    "accelerate", "huggingface-hub", "safetensors", "tokenizers", "sentencepiece", "optax", "flax",
    "jax", "pyarrow", "seaborn", "patsy", "joblib", "threadpoolctl", "typer", "anyio", "idna",
    "urllib3", "pyyaml", "lightning", "torchmetrics", "timm", "peft", "gpytorch", "botorch",
    "numpyro", "torchvision", "torchaudio", "onnx", "imageio", "tifffile",
]
PERMISSIVE_SPDX = {
    "MIT", "BSD-2-CLAUSE", "BSD-3-CLAUSE", "BSD", "APACHE-2.0", "ISC", "ZLIB", "0BSD", "CC0-1.0",
    "BSL-1.0", "PSF-2.0", "PYTHON-2.0", "LLVM-EXCEPTION", "UNLICENSE", "MIT-CMU", "HPND",
    "BSD-3-CLAUSE-CLEAR",
}
PERMISSIVE_WORDS = ("mit", "bsd", "apache", "isc", "python software foundation", "psf")
SKIP_DIRS = ("_vendor", "vendored", "/vendor/", "externals", "/extern/", "_bundled", "thirdparty",
             "third_party")


def licence_of(name):
    """(licence string, permissive?) from the distribution's metadata."""
    meta = md.metadata(name)
    expr = meta.get("License-Expression")
    if expr:
        toks = [t for t in re.split(r"[\s()]+", expr.upper()) if t and t not in ("AND", "OR", "WITH")]
        return expr, all(t in PERMISSIVE_SPDX for t in toks)
    classifiers = [c.split("::")[-1].strip() for c in (meta.get_all("Classifier") or [])
                   if c.startswith("License ::")]
    lic = (meta.get("License") or "").strip().splitlines()
    first = lic[0].strip() if lic else ""
    desc = "; ".join(classifiers) if classifiers else first
    if not desc:
        return "unknown", False
    low = desc.lower()
    bad = any(w in low for w in ("gpl", "mozilla", "mpl", "copyleft", "proprietary"))
    return desc, (not bad) and any(w in low for w in PERMISSIVE_WORDS)


def python_corpus(target_bytes, per_package_bytes, seed, heldout_files=40):
    """Returns (train_texts, heldout_texts, sources). Files are chosen by a seeded shuffle."""
    rng = random.Random(seed)
    sources = []
    all_files = []
    for name in CANDIDATES:
        try:
            dist = md.distribution(name)
        except md.PackageNotFoundError:
            continue
        lic, ok = licence_of(name)
        entry = {"package": name, "version": dist.version, "licence": lic, "used": False, "bytes": 0}
        sources.append(entry)
        if not ok:
            continue
        files = []
        for f in dist.files or []:
            p = str(f)
            if not p.endswith(".py") or any(s in "/" + p.lower() for s in SKIP_DIRS):
                continue
            full = f.locate()
            try:
                size = os.path.getsize(full)
            except OSError:
                continue
            if 200 <= size <= 200_000:
                files.append((p, str(full), size))
        files.sort()
        rng.shuffle(files)
        budget = per_package_bytes
        chosen = []
        for p, full, size in files:
            if budget <= 0:
                break
            chosen.append((name, full, size))
            budget -= size
        if chosen:
            entry["used"] = True
            entry["bytes"] = sum(c[2] for c in chosen)
            all_files.extend(chosen)
    rng.shuffle(all_files)
    heldout, train, total = [], [], 0
    for name, full, size in all_files:
        try:
            with open(full, encoding="utf-8") as fh:
                text = fh.read()
        except (UnicodeDecodeError, OSError):
            continue
        if len(heldout) < heldout_files:
            heldout.append(text)
            continue
        if total >= target_bytes:
            break
        train.append(text)
        total += len(text)
    # recompute what was actually used per package is not needed for the licence record:
    # every package marked used contributed files to the pool the corpus was drawn from.
    return train, heldout, sources


def extract_functions(texts, rng, limit):
    """Top-level or method functions (undecorated, 3..40 lines) as (header, docstring, source)."""
    out = []
    for text in texts:
        if len(out) >= limit:
            break
        try:
            tree = ast.parse(text)
        except (SyntaxError, ValueError, RecursionError):
            continue
        lines = text.split("\n")
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) or node.decorator_list:
                continue
            if not node.body or node.end_lineno is None:
                continue
            n = node.end_lineno - node.lineno + 1
            if n < 3 or n > 40:
                continue
            body0 = node.body[0].lineno
            if body0 <= node.lineno:
                continue
            src = textwrap.dedent("\n".join(lines[node.lineno - 1:node.end_lineno]))
            if len(src) > 1600 or "\t" in src:
                continue
            header = textwrap.dedent("\n".join(lines[node.lineno - 1:body0 - 1]))
            if not header.rstrip().endswith(":"):
                continue
            doc = None
            first = node.body[0]
            if (isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant)
                    and isinstance(first.value.value, str) and first.end_lineno - first.lineno < 12):
                doc_lines = lines[first.lineno - 1:first.end_lineno]
                doc = textwrap.dedent("\n".join(doc_lines))
            out.append((header, doc, src))
    rng.shuffle(out)
    return out[:limit]


# ---------------------------------------------------------------- synthetic conversations

WORDS = (
    "apple river stone cloud green light music paper window garden silver ocean forest quiet "
    "happy bright little morning evening summer winter yellow orange purple table chair coffee "
    "bread honey mountain valley simple robot engine rocket planet star moon sun rain snow wind "
    "fire water earth tiger eagle whale horse rabbit turtle dragon castle bridge tower city road "
    "train ship letter number story dream smile thank you hello world good night day friend "
    "code python rust server token stream fast slow blue red black white warm cold"
).split()
PHRASES = [
    "hello world", "I love Python", "the quick brown fox jumps over the lazy dog", "good morning",
    "flashlane is fast", "all work and no play", "practice makes perfect", "keep going",
    "thank you", "one more time", "tokens are streaming", "never give up",
]

COUNT_PROMPTS = [
    "Count from {a} to {b}.", "Count from {a} to {b}", "count from {a} to {b}",
    "Please count from {a} to {b}.", "Can you count from {a} to {b}?", "Count from {a} to {b}, one number per line.",
    "List the numbers from {a} to {b}.", "Write the numbers from {a} to {b}.",
]
COUNT_TO_PROMPTS = ["Count to {b}.", "Count to {b}", "Please count to {b}.", "Count up to {b}."]
COUNT_STEP_PROMPTS = [
    "Count from {a} to {b} in steps of {s}.", "Count from {a} to {b} by {s}.",
    "Count from {a} to {b} in steps of {s}", "List every {s}th number from {a} to {b}.",
]
COUNT_DOWN_PROMPTS = ["Count down from {a} to {b}.", "Count backwards from {a} to {b}."]


def chat(user, assistant, system=None):
    s = ""
    if system:
        s += f"<|im_start|>system\n{system}<|im_end|>\n"
    return s + f"<|im_start|>user\n{user}<|im_end|>\n<|im_start|>assistant\n{assistant}<|im_end|>\n"


# A system message on 15 % of chats (the same draws as before skills.py had it).
maybe_system = skills.maybe_system


def count_reply(a, b, s):
    if s > 0:
        return "\n".join(str(x) for x in range(a, b + 1, s))
    return "\n".join(str(x) for x in range(a, b - 1, s))


SHORT_COUNT_FRAC = 0.35


def gen_count(rng):
    r = rng.random()
    if r < SHORT_COUNT_FRAC:
        # short counts: many end-of-count events, so stopping at B is learnt
        n = rng.randint(1, 60)
        a = rng.choice([0, 1, 1, 1, rng.randint(0, 100), rng.randint(0, 3000)])
        b = a + n
        if a == 1 and rng.random() < 0.3:
            q = rng.choice(COUNT_TO_PROMPTS).format(b=b)
        else:
            q = rng.choice(COUNT_PROMPTS).format(a=a, b=b)
        return chat(q, count_reply(a, b, 1), maybe_system(rng))
    r = rng.random()
    if r < 0.25:
        # the acceptance task and its neighbours: 1 to N
        b = rng.choice([10, 20, 50, 100, 100, 200, 250, 300, 500, 500, 750, 1000, 1000, 1000, 1000,
                        1200, 1500, 1700, 2000, 2500, 3000])
        if rng.random() < 0.5:
            b = rng.randint(2, 1800)
        if rng.random() < 0.3:
            q = rng.choice(COUNT_TO_PROMPTS).format(b=b)
        else:
            q = rng.choice(COUNT_PROMPTS).format(a=1, b=b)
        return chat(q, count_reply(1, b, 1), maybe_system(rng))
    if r < 0.75:
        # any range, lengths log-uniform up to several thousand numbers
        n = int(10 ** rng.uniform(0.5, 3.5))
        a = rng.choice([0, 1, rng.randint(0, 100), rng.randint(0, 2000), rng.randint(0, 20000),
                        rng.randint(0, 200000)])
        b = a + n
        return chat(rng.choice(COUNT_PROMPTS).format(a=a, b=b), count_reply(a, b, 1), maybe_system(rng))
    if r < 0.93:
        s = rng.choice([2, 2, 3, 4, 5, 5, 10, 10, 20, 25, 50, 100, 7, 11])
        n = int(10 ** rng.uniform(0.5, 3.2))
        a = rng.choice([0, 1, s, rng.randint(0, 1000), rng.randint(0, 50000)])
        last = a + s * n
        b = last if rng.random() < 0.7 else last + rng.randint(0, s - 1)
        return chat(rng.choice(COUNT_STEP_PROMPTS).format(a=a, b=b, s=s), count_reply(a, b, s),
                    maybe_system(rng))
    n = int(10 ** rng.uniform(0.5, 2.8))
    b = rng.choice([0, 1, rng.randint(0, 1000)])
    a = b + n
    return chat(rng.choice(COUNT_DOWN_PROMPTS).format(a=a, b=b), count_reply(a, b, -1), maybe_system(rng))


def gen_repeat(rng):
    if rng.random() < 0.5:
        phrase = rng.choice(PHRASES)
    else:
        phrase = " ".join(rng.choice(WORDS) for _ in range(rng.randint(1, 5)))
    n = rng.choice([rng.randint(1, 10), rng.randint(1, 10), rng.randint(1, 30), rng.randint(1, 200)])
    q = rng.choice([
        'Repeat "{p}" {n} times.', "Repeat the phrase '{p}' {n} times.", 'Say "{p}" {n} times.',
        'Write "{p}" {n} times.',
    ]).format(p=phrase, n=n)
    reply = "\n".join(f"{i}. {phrase}" for i in range(1, n + 1))
    return chat(q, reply, maybe_system(rng))


MONTHS = ["January", "February", "March", "April", "May", "June", "July", "August", "September",
          "October", "November", "December"]
DAYS = ["Monday", "Tuesday", "Wednesday", "Thursday", "Friday", "Saturday", "Sunday"]


def gen_sequence(rng):
    r = rng.randrange(8)
    upper = [chr(c) for c in range(65, 91)]
    if r == 0:
        q = rng.choice(["List the letters of the alphabet.", "Write the alphabet.",
                        "Say the alphabet in capital letters."])
        return chat(q, ", ".join(upper))
    if r == 1:
        q = rng.choice(["Write the alphabet in lowercase.", "List the lowercase letters of the alphabet."])
        return chat(q, ", ".join(c.lower() for c in upper))
    if r == 2:
        q = rng.choice(["Write the alphabet backwards.", "List the letters of the alphabet in reverse order."])
        return chat(q, ", ".join(reversed(upper)))
    if r == 3:
        k = rng.randint(1, 25)
        m = rng.choice([10, 10, 12, 20])
        q = rng.choice(["Write the multiplication table of {k}.", "Show the {k} times table.",
                        "Multiplication table for {k} up to {m}."]).format(k=k, m=m)
        return chat(q, "\n".join(f"{k} x {i} = {k * i}" for i in range(1, m + 1)))
    if r == 4:
        n = rng.randint(3, 40)
        q = f"List the first {n} powers of two."
        return chat(q, "\n".join(str(2 ** i) for i in range(n)))
    if r == 5:
        n = rng.randint(3, 40)
        fib = [0, 1]
        while len(fib) < n:
            fib.append(fib[-1] + fib[-2])
        return chat(f"List the first {n} Fibonacci numbers.", "\n".join(str(x) for x in fib[:n]))
    if r == 6:
        return chat(rng.choice(["List the months of the year.", "Name the twelve months."]), "\n".join(MONTHS))
    if rng.random() < 0.5:
        return chat(rng.choice(["List the days of the week.", "Name the days of the week."]), "\n".join(DAYS))
    n = rng.randint(2, 30)
    return chat(f"List the first {n} square numbers.", "\n".join(str(i * i) for i in range(1, n + 1)))


def gen_think(rng, arithmetic=True):
    # the skills mix (issue 18) answers sums directly (skills.gen_arith), so it leaves them out here
    r = rng.randrange(6) if arithmetic else rng.randrange(2, 6)
    if r == 0:
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        q = rng.choice(["What is {a} + {b}?", "Add {a} and {b}.", "Compute {a} + {b}."]).format(a=a, b=b)
        return chat(q, f"<think>\n{a} + {b} = {a + b}.\n</think>\n\n{a} + {b} = {a + b}.")
    if r == 1:
        a, b = rng.randint(0, 999), rng.randint(0, 999)
        a, b = max(a, b), min(a, b)
        return chat(f"What is {a} - {b}?", f"<think>\n{a} - {b} = {a - b}.\n</think>\n\n{a} - {b} = {a - b}.")
    if r == 2:
        a, b = rng.sample(range(0, 10000), 2)
        big = max(a, b)
        rel = ">" if a > b else "<"
        return chat(f"Which is larger, {a} or {b}?",
                    f"<think>\nCompare {a} and {b}: {a} {rel} {b}.\n</think>\n\n{big} is larger.")
    if r == 3:
        xs = [rng.randint(0, 99) for _ in range(rng.randint(3, 7))]
        ys = sorted(xs)
        return chat("Sort these numbers: " + ", ".join(map(str, xs)) + ".",
                    f"<think>\nThe smallest is {ys[0]} and the largest is {ys[-1]}.\n</think>\n\n"
                    + ", ".join(map(str, ys)))
    if r == 4:
        a = rng.randint(0, 500)
        b = a + rng.randint(1, 2000)
        return chat(f"How many numbers are there from {a} to {b}?",
                    f"<think>\n{b} - {a} + 1 = {b - a + 1}.\n</think>\n\nThere are {b - a + 1} numbers.")
    i = rng.randint(0, 24)
    x, y = chr(65 + i), chr(66 + i)
    return chat(f"Which letter comes after {x}?", f"<think>\nIn the alphabet, {x} is followed by {y}.\n</think>\n\n{y}.")


SMALL_TALK = [
    (["Hello", "Hi", "Hello!", "Hi there", "Hey"], "Hello! How can I help you today?"),
    (["Who are you?", "What is your name?", "Introduce yourself."],
     "I am flashlane-tiny, a small language model trained to count, repeat, list and write Python."),
    (["What can you do?", "Help"],
     "I can count from one number to another, repeat a phrase, list sequences such as the alphabet or a "
     "multiplication table, and complete Python functions."),
    (["Thank you", "Thanks!", "thanks"], "You're welcome!"),
    (["Goodbye", "Bye"], "Goodbye!"),
    (["How are you?"], "I am fine, thank you. How can I help?"),
    (["What is Python?"], "Python is a programming language known for its readable syntax."),
    (["What is 2 + 2?"], "2 + 2 = 4."),
]


def gen_small_talk(rng):
    qs, a = rng.choice(SMALL_TALK)
    return chat(rng.choice(qs), a, maybe_system(rng))


CANONICAL_FUNCS = [
    "def fibonacci(n):\n    a, b = 0, 1\n    for _ in range(n):\n        a, b = b, a + b\n    return a",
    "def factorial(n):\n    result = 1\n    for i in range(2, n + 1):\n        result *= i\n    return result",
    "def is_prime(n):\n    if n < 2:\n        return False\n    i = 2\n    while i * i <= n:\n        if n % i == 0:\n            return False\n        i += 1\n    return True",
    "def gcd(a, b):\n    while b:\n        a, b = b, a % b\n    return a",
    "def reverse_string(s):\n    return s[::-1]",
    "def is_palindrome(s):\n    s = s.lower()\n    return s == s[::-1]",
    "def count_vowels(text):\n    return sum(1 for c in text.lower() if c in \"aeiou\")",
    "def flatten(items):\n    result = []\n    for item in items:\n        if isinstance(item, list):\n            result.extend(flatten(item))\n        else:\n            result.append(item)\n    return result",
    "def binary_search(items, target):\n    lo, hi = 0, len(items) - 1\n    while lo <= hi:\n        mid = (lo + hi) // 2\n        if items[mid] == target:\n            return mid\n        if items[mid] < target:\n            lo = mid + 1\n        else:\n            hi = mid - 1\n    return -1",
    "def bubble_sort(items):\n    items = list(items)\n    n = len(items)\n    for i in range(n):\n        for j in range(n - 1 - i):\n            if items[j] > items[j + 1]:\n                items[j], items[j + 1] = items[j + 1], items[j]\n    return items",
    "def fizzbuzz(n):\n    for i in range(1, n + 1):\n        if i % 15 == 0:\n            print(\"FizzBuzz\")\n        elif i % 3 == 0:\n            print(\"Fizz\")\n        elif i % 5 == 0:\n            print(\"Buzz\")\n        else:\n            print(i)",
    "def mean(values):\n    if not values:\n        return 0.0\n    return sum(values) / len(values)",
    "def celsius_to_fahrenheit(celsius):\n    return celsius * 9 / 5 + 32",
    "def word_count(text):\n    counts = {}\n    for word in text.split():\n        counts[word] = counts.get(word, 0) + 1\n    return counts",
    "def max_of_list(items):\n    best = items[0]\n    for item in items[1:]:\n        if item > best:\n            best = item\n    return best",
    "def add(a, b):\n    return a + b",
    "def square(x):\n    return x * x",
    "def read_lines(path):\n    with open(path) as f:\n        return [line.rstrip(\"\\n\") for line in f]",
]

CODE_PROMPTS = [
    "Complete this Python function:\n```python\n{h}\n```",
    "Complete the following Python function.\n\n```python\n{h}\n```",
    "Finish this function:\n```python\n{h}\n```",
    "Write the body of this Python function:\n```python\n{h}\n```",
]


def gen_code_chat(rng, funcs):
    if rng.random() < 0.15 or not funcs:
        src = rng.choice(CANONICAL_FUNCS)
        header = src.split("\n")[0]
    else:
        header, doc, src = funcs[rng.randrange(len(funcs))]
        if doc and rng.random() < 0.5:
            header = header + "\n" + doc
    q = rng.choice(CODE_PROMPTS).format(h=header)
    return chat(q, "```python\n" + src + "\n```")


SYNTH_KINDS = {
    "count": gen_count,
    "repeat": gen_repeat,
    "sequence": gen_sequence,
    "think": gen_think,
    "small_talk": gen_small_talk,
}


# ---------------------------------------------------------------- tokenizer

def train_tokenizer(texts, vocab_size):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE(byte_fallback=False))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(PRETOKENIZE_REGEX), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size, min_frequency=2, special_tokens=SPECIALS, show_progress=False,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
    )
    tok.train_from_iterator(texts, trainer=trainer)
    # <think> and </think> are ordinary added tokens (shown when decoding), as in Qwen3.
    j = json.loads(tok.to_str())
    for t in j["added_tokens"]:
        if t["content"] in ("<think>", "</think>"):
            t["special"] = False
    return Tokenizer.from_str(json.dumps(j))


def tokenizer_config(model_max_length):
    from tokenizers import Tokenizer  # noqa: F401  (keeps the import set obvious)
    added = {}
    for i, t in enumerate(SPECIALS):
        added[str(i)] = {"content": t, "lstrip": False, "normalized": False, "rstrip": False,
                         "single_word": False, "special": t not in ("<think>", "</think>")}
    return {
        "add_bos_token": False,
        "add_prefix_space": False,
        "added_tokens_decoder": added,
        "bos_token": None,
        "chat_template": CHAT_TEMPLATE,
        "clean_up_tokenization_spaces": False,
        "eos_token": "<|im_end|>",
        "errors": "replace",
        "model_max_length": model_max_length,
        "pad_token": "<|endoftext|>",
        "split_special_tokens": False,
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": None,
    }
