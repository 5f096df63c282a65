"""No two of the project's modules import each other, directly or through others: every import
counts, at the top of a module or inside a function (a lazy import hides a circle from the
interpreter, not from a reader)."""

from __future__ import annotations

import ast
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix
from scipy.sparse.csgraph import connected_components

ROOT = Path(__file__).resolve().parent.parent
# where each package's modules live: kernels/ installs as ubepsim.kernels
PACKAGES = {"ubepsim": ROOT / "ubepsim", "ubepsim.kernels": ROOT / "kernels"}


def _modules() -> dict[str, Path]:
    """Every module of the project by its dotted name (a package by its own name)."""
    out = {}
    for prefix, base in PACKAGES.items():
        for path in base.rglob("*.py"):
            parts = path.relative_to(base).with_suffix("").parts
            name = ".".join((prefix, *parts))
            out[name.removesuffix(".__init__")] = path
    return out


def _imported(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project's modules that `name` imports (a `from package import x` names module
    package.x where x is one, else the package)."""
    package = name if path.name == "__init__.py" else name.rsplit(".", 1)[0]
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level > 1 else package
            source = (f"{base}.{node.module}" if node.module else base) if node.level \
                else node.module
            out |= {f"{source}.{a.name}" if f"{source}.{a.name}" in modules else source
                    for a in node.names}
    return {m for m in out if m in modules and m != name}


def circles(edges: dict[str, set[str]]) -> list[list[str]]:
    """The groups of modules that import each other, through any path."""
    names = sorted(edges)
    index = {n: i for i, n in enumerate(names)}
    rows, cols = zip(*[(index[a], index[b]) for a in names for b in edges[a]]) or ((), ())
    graph = csr_matrix((np.ones(len(rows)), (rows, cols)), shape=(len(names),) * 2)
    _, label = connected_components(graph, directed=True, connection="strong")
    groups = [[n for n, x in zip(names, label) if x == c] for c in np.unique(label)]
    return [g for g in groups if len(g) > 1]


def test_the_circle_finder_finds_a_circle():
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set()}) == []


def test_no_module_imports_itself_through_others():
    modules = _modules()
    assert "ubepsim.kernels.layout" in modules and "ubepsim.model.api" in modules
    edges = {name: _imported(name, path, modules) for name, path in modules.items()}
    # the finder reads relative and lazy imports: api imports groups at its top, tune imports
    # api inside a function
    assert "ubepsim.model.groups" in edges["ubepsim.model.api"]
    assert "ubepsim.model.api" in edges["ubepsim.fit.tune"]
    assert circles(edges) == []
