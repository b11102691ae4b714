"""No import circle inside a crate: within each crate of `crates/`, the top-level modules (a
file or folder under `src/`) must import one another in one direction only. A module's imports
are its `crate::NAME` paths in code (comments and `#[cfg(test)]` modules left out: a test may
reach anywhere); a child module's use of its parent (`super::`) is containment, not a circle.

    python3 scripts/check_module_cycles.py      (exit status 1 and the circles found, if any)
"""

import os
import re
import sys

TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
INLINE_TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
CRATE_PATH = re.compile(r"crate::(?:\{\s*)?(\w+)")


def code_of(text):
    """The text without comments and without an inline test module (everything after it)."""
    match = INLINE_TEST_MODULE.search(text)
    if match:
        text = text[: match.start()]
    return "\n".join(line.split("//")[0] for line in text.splitlines())


def test_only_paths(src):
    """Files and folders of modules declared under `#[cfg(test)]`."""
    out = set()
    for root, _, files in os.walk(src):
        for name in files:
            if not name.endswith(".rs"):
                continue
            path = os.path.join(root, name)
            here = root if name in ("mod.rs", "lib.rs", "main.rs") else path[:-3]
            for module in TEST_MODULE.findall(open(path, encoding="utf-8").read()):
                out.add(os.path.join(here, module + ".rs"))
                out.add(os.path.join(here, module))
    return out


def graph(src):
    """Top-level module → the top-level modules it imports."""
    tests = test_only_paths(src)
    files = {}
    for root, _, names in os.walk(src):
        for name in names:
            path = os.path.join(root, name)
            if not name.endswith(".rs") or any(
                path == t or path.startswith(t + os.sep) for t in tests
            ):
                continue
            parts = os.path.relpath(path, src)[:-3].split(os.sep)
            if parts[-1] in ("mod", "lib", "main"):
                parts = parts[:-1]
            if parts:
                files.setdefault(parts[0], []).append(path)
    edges = {m: set() for m in files}
    for module, paths in files.items():
        for path in paths:
            for target in CRATE_PATH.findall(code_of(open(path, encoding="utf-8").read())):
                if target != module and target in files:
                    edges[module].add(target)
    return edges


def circles(edges):
    found, state = [], {}

    def visit(node, stack):
        state[node] = "open"
        stack.append(node)
        for nxt in sorted(edges[node]):
            if state.get(nxt) == "open":
                found.append(stack[stack.index(nxt):] + [nxt])
            elif nxt not in state:
                visit(nxt, stack)
        stack.pop()
        state[node] = "done"

    for node in sorted(edges):
        if node not in state:
            visit(node, [])
    return found


def main():
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "crates")
    bad = False
    for crate in sorted(os.listdir(root)):
        src = os.path.join(root, crate, "src")
        if not os.path.isdir(src):
            continue
        for circle in circles(graph(src)):
            bad = True
            print(f"{crate}: import circle {' -> '.join(circle)}")
    if not bad:
        print("no import circle inside any crate")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
