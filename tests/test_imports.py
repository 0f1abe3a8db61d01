"""No two modules of the package import each other (a cycle such as plots <-> report).

Every ``import`` and ``from ... import`` in every module (at top level or inside a function:
a lazy import is still a dependency) is resolved to a module of ``umpipe_bench``; the test fails
on any pair that imports each other. The planners' rooms import downward only: evaluation, then
search, then algorithms (one named exception).
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("umpipe_bench",)


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _imports(path: Path, known: set[str]) -> set[str]:
    name = _module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        targets: list[str] = []
        if isinstance(node, ast.Import):
            targets = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")
                anchor = anchor[: len(anchor) - (node.level - 1)]
                base = ".".join([*anchor, base] if base else anchor)
            targets = [f"{base}.{a.name}" for a in node.names] + [base]
        for t in targets:
            while t and t not in known:
                t = t.rpartition(".")[0]
            if t and t != name:
                out.add(t)
    return out


def test_no_two_modules_import_each_other():
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    known = {_module_name(p) for p in files}
    graph = {_module_name(p): _imports(p, known) for p in files}
    pairs = sorted({tuple(sorted((a, b))) for a, deps in graph.items() for b in deps
                    if a in graph.get(b, set())
                    and not (a.startswith(b + ".") or b.startswith(a + "."))})
    assert pairs == []


def test_the_report_and_the_plots_share_tables_not_each_other():
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    known = {_module_name(p) for p in files}
    plots = _imports(ROOT / "umpipe_bench/bench/plots.py", known)
    assert "umpipe_bench.bench.report" not in plots
    assert "umpipe_bench.bench.tables" in plots


#: The planners' rooms, lowest first: a module imports from its own room or a lower one.
ROOMS = ("evaluation", "search", "algorithms")
#: The one import that goes up: every GA's seeded population holds the greedy plans.
UPWARD_ALLOWED = {
    ("umpipe_bench.planners.search.seeding", "umpipe_bench.planners.algorithms.greedy"),
}


def _room(module: str) -> int | None:
    parts = module.split(".")
    if parts[:2] == ["umpipe_bench", "planners"] and len(parts) > 2 and parts[2] in ROOMS:
        return ROOMS.index(parts[2])
    return None


def test_the_planner_rooms_import_downward():
    files = [p for pkg in PACKAGES for p in (ROOT / pkg).rglob("*.py")]
    known = {_module_name(p) for p in files}
    upward = sorted(
        (a, b)
        for p in (ROOT / "umpipe_bench/planners").rglob("*.py")
        for a in [_module_name(p)]
        for b in _imports(p, known)
        if _room(a) is not None and _room(b) is not None and _room(b) > _room(a)
        and (a, b) not in UPWARD_ALLOWED
    )
    assert upward == []
