"""No import circle inside a crate: within each crate of `crates/`, the top-level modules (a
file or folder under `src/`) must import one another in one direction only. A module's imports
are the paths `crate::NAME…` in its code, NAME being a module or an item the crate root
re-exports from one (`pub use module::{Item, …}`), every name inside `crate::{…}` counted;
comments and `#[cfg(test)]` modules are left out (a test may reach anywhere; an inline test
module is taken to end its file, as every one here does), and a child
module's use of its parent (`super::`) is containment, not a circle.

    python3 scripts/check_module_cycles.py      (exit status 1 and the circles found, if any)
"""

import os
import re
import sys

TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+(\w+)\s*;")
INLINE_TEST_MODULE = re.compile(r"#\[cfg\(test\)\]\s*(?:pub(?:\([^)]*\))?\s+)?mod\s+\w+\s*\{")
CRATE_PATH = re.compile(r"crate::(\{[^}]*\}|\w+)")
REEXPORT = re.compile(r"pub use (\w+)::(\{[^}]*\}|\w+)", re.S)


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


def reexports(src):
    """Item name → the module the crate root re-exports it from."""
    out = {}
    for root_file in ("lib.rs", "main.rs"):
        path = os.path.join(src, root_file)
        if os.path.exists(path):
            for module, items in REEXPORT.findall(code_of(open(path, encoding="utf-8").read())):
                for item in re.findall(r"\w+", items):
                    out.setdefault(item, module)
    return out


def imported(code, modules, items):
    """The top-level modules `code` names through `crate::`."""
    out = set()
    for path in CRATE_PATH.findall(code):
        # `name` or `{a::b, c, …}`: the first segment of each path.
        for name in (p.split("::")[0] for p in re.findall(r"[\w:]+", path)):
            if name in modules:
                out.add(name)
            elif name in items:
                out.add(items[name])
    return out


def graph(src):
    """Top-level module → the top-level modules it imports."""
    tests = test_only_paths(src)
    items = reexports(src)
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
            code = code_of(open(path, encoding="utf-8").read())
            edges[module] |= imported(code, files, items) - {module}
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
