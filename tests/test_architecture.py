"""The house's rules, read from the code itself (docs/architecture.md states them):

- which package may import which (``limiter`` imports nothing of ours, ``protocol`` only ``limiter``, ...);
- no import cycle between modules, type-checking imports included (a cycle is a cycle for a reader too);
- modules under ~300 lines, or named in docs/architecture.md with the reason;
- nothing in the repo cites a document the repo does not contain.
"""

from __future__ import annotations

import ast
import re
import subprocess
from pathlib import Path

import pytest

pytestmark = pytest.mark.unit

ROOT = Path(__file__).resolve().parents[1]
OURS = ("limiter", "protocol", "metrics", "collectors", "controlplane", "dashboard", "benchmarks")
MAY_IMPORT = {
    "limiter": set(),
    "protocol": {"limiter"},
    "metrics": {"limiter", "protocol"},
    "collectors": {"limiter", "protocol"},
    "controlplane": {"limiter", "protocol", "metrics"},
    "dashboard": {"protocol", "metrics"},
    "benchmarks": set(OURS),
}
LONG_LINES = 320   # "~300": a module this long or longer is named in docs/architecture.md, with why
LONG_SECTION = "## Modules longer than ~300 lines"


def modules() -> dict[str, Path]:
    out = {}
    for package in OURS:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = path.relative_to(ROOT).with_suffix("").parts
            out[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return out


def imports_of(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The modules of ours that ``name`` (at ``path``) imports, anywhere in it (functions, TYPE_CHECKING too)."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            # ``from pkg import sub`` imports the submodule when there is one, else a name of pkg
            targets = [f"{base}.{a.name}" if f"{base}.{a.name}" in known else base for a in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != name:
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    known = modules()
    return {name: imports_of(name, path, known) for name, path in known.items()}


def test_every_package_imports_only_what_the_documented_direction_allows() -> None:
    wrong = sorted(f"{a} imports {b}" for a, targets in graph().items() for b in targets
                   if b.split(".")[0] != a.split(".")[0] and b.split(".")[0] not in MAY_IMPORT[a.split(".")[0]])
    assert not wrong, "imports against the direction in docs/architecture.md:\n" + "\n".join(wrong)


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan, iteratively)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: list[list[str]] = []
    for root in edges:
        if root in index:
            continue
        work = [(root, iter(sorted(edges[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(edges.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    out.append(sorted(component))
    return out


def test_cycles_finds_a_cycle_and_passes_a_chain() -> None:
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert cycles({"a": {"b"}, "b": {"c"}, "c": set()}) == []


def test_no_module_imports_itself_back() -> None:
    found = cycles(graph())
    assert not found, "import cycles: " + "; ".join(" <-> ".join(c) for c in found)


def test_a_long_module_says_in_docs_architecture_why_it_is_long() -> None:
    doc = (ROOT / "docs" / "architecture.md").read_text()
    doc = doc[doc.index(LONG_SECTION):].split("\n## ")[0] if LONG_SECTION in doc else ""
    long = {str(p.relative_to(ROOT)): len(p.read_text().splitlines()) for p in modules().values()}
    unexplained = sorted(f"{p} ({n} lines)" for p, n in long.items() if n >= LONG_LINES and f"`{p}`" not in doc)
    assert not unexplained, f"modules of {LONG_LINES}+ lines not explained in docs/architecture.md: {unexplained}"


CITES_OUTSIDE = re.compile(r"DESIGN\.md|REFERENCE\.md|\.\./shared|\b(?:issue|task) #\d+", re.IGNORECASE)


def test_nothing_in_the_repo_cites_a_document_it_does_not_contain() -> None:
    files = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=True).stdout.split()
    hits = []
    for name in files:
        path = ROOT / name
        if path.suffix not in (".py", ".md", ".toml", ".txt", ".yml", ".yaml", ".json") or not path.is_file():
            continue
        if path == Path(__file__):
            continue
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
            if CITES_OUTSIDE.search(line):
                hits.append(f"{name}:{number}: {line.strip()[:100]}")
    assert not hits, "citations of documents outside the repo:\n" + "\n".join(hits)
