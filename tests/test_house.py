"""The house rules of the source tree (#20, "the house"): no module imports another that
imports it back, lazily or not; providers/ holds only adapters to real clouds, and what
stands in for a cloud lives in costguard/demo/."""

from __future__ import annotations

import ast
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1] / "costguard"


def _module(path: Path) -> str:
    parts = path.relative_to(ROOT.parent).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


MODULES = {_module(p): p for p in ROOT.rglob("*.py")}


def _imports(path: Path) -> Iterator[str]:
    """Every costguard module `path` imports at run time, at the top or inside a function
    (a lazy import still closes a circle), but not under `if TYPE_CHECKING:`."""
    def walk(node: ast.AST) -> Iterator[str]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                continue
            if isinstance(child, ast.ImportFrom) and child.module \
                    and child.module.startswith("costguard"):
                for alias in child.names:
                    full = f"{child.module}.{alias.name}"
                    yield full if full in MODULES else child.module
            elif isinstance(child, ast.Import):
                yield from (a.name for a in child.names if a.name.startswith("costguard"))
            yield from walk(child)
    yield from (m for m in walk(ast.parse(path.read_text())) if m in MODULES)


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components of more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(v: str) -> None:
        index[v] = low[v] = len(index)
        stack.append(v)
        for w in graph.get(v, ()):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            component = []
            while True:
                w = stack.pop()
                component.append(w)
                if w == v:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def _graph() -> dict[str, set[str]]:
    return {m: set(_imports(p)) - {m} for m, p in MODULES.items()}


def test_no_module_imports_one_that_imports_it_back() -> None:
    assert _cycles(_graph()) == []


def test_the_cycle_finder_finds_a_circle_and_its_members() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert _cycles(graph) == [["a", "b", "c"]]
    assert _cycles({"a": {"b"}, "b": set()}) == []


def test_providers_hold_only_adapters_to_real_clouds() -> None:
    providers = {m for m in MODULES if m.startswith("costguard.providers")}
    stand_ins = [m for m in providers
                 if any(w in m.rsplit(".", 1)[-1] for w in ("fake", "sim", "demo"))]
    assert stand_ins == []
    reaching = {m for m in providers for d in _imports(MODULES[m])
                if d.startswith("costguard.demo")}
    assert reaching == {"costguard.providers.registry"}  # it builds the simulated cloud
    room = {m.rsplit(".", 1)[-1] for m in MODULES if m.startswith("costguard.demo.")}
    assert {"sim", "aws_fleet", "gcp_fake", "server", "run"} <= room


def test_no_doc_installs_a_name_this_project_does_not_own() -> None:
    # `costguard` on the Python package index is an unrelated project: the distribution
    # is costguard-gpu, and docs install the wheel this project builds (make dist)
    import re
    import tomllib

    root = Path(__file__).resolve().parents[1]
    meta = tomllib.loads((root / "pyproject.toml").read_text())
    assert meta["project"]["name"] == "costguard-gpu"
    wrong = re.compile(r"pip3? install[^\n]*?['\"\s]costguard(?![-_\w/.])(\[[\w,]*\])?")
    places = [root / "README.md", *(root / "docs").rglob("*.md"), *(root / "deploy").rglob("*"),
              *(root / "costguard").rglob("*.py")]
    found = [f"{p.relative_to(root)}: {m.group(0)}" for p in places if p.is_file()
             and p.suffix not in (".png", ".svg")
             for m in wrong.finditer(p.read_text(errors="replace"))]
    assert not found, found
    notes = (root / "deploy/helm/costguard/templates/NOTES.txt").read_text()
    assert "make image" in notes and "publishes no image" in notes
    assert "make image" in (root / "deploy/helm/costguard/README.md").read_text()
