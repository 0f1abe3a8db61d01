from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import pytest

from umpipe_bench.problem import Link, Problem, StageCosts
from umpipe_bench.schedules import Op


def make_problem(
    fwd: Sequence[Sequence[float]],
    bwd: Sequence[Sequence[float]],
    rbwd: Sequence[Sequence[float]] | None = None,
    opt: Sequence[float] | None = None,
    links: Sequence[Link] | None = None,
    name: str = "hand",
) -> Problem:
    """A problem with tables given at every size 1..B (no interpolation involved)."""
    S, B = len(fwd), len(fwd[0])
    rbwd = rbwd if rbwd is not None else [
        [f + b for f, b in zip(fs, bs)] for fs, bs in zip(fwd, bwd)
    ]
    opt = opt if opt is not None else [0.0] * S
    links = links if links is not None else [Link(0.0, 0.0, 0.0, 1.0)] * (S - 1)
    return Problem(
        name=name,
        B=B,
        sizes=tuple(range(1, B + 1)),
        stages=tuple(
            StageCosts(fwd=tuple(fwd[s]), bwd=tuple(bwd[s]), rbwd=tuple(rbwd[s]), opt=opt[s])
            for s in range(S)
        ),
        links=tuple(links),
        provenance={"source": "test", "device": "none"},
    ).validate()


@pytest.fixture(scope="session")
def script_module():
    """A loader of the modules in ``scripts/`` (``script_module("plan_speed")``), which are
    not a package: the folder is on ``sys.path`` only while one is imported."""
    import importlib
    import sys
    from pathlib import Path

    folder = str(Path(__file__).resolve().parents[1] / "scripts")

    def load(name: str):
        sys.path.insert(0, folder)
        try:
            return importlib.import_module(name)
        finally:
            sys.path.remove(folder)

    return load


@pytest.fixture
def problem_factory():
    return make_problem


def pytest_collection_modifyitems(config, items):
    """Tests that launch processes (``runtime``) belong to the slow tier too: the fast tier,
    ``pytest -m "not slow"``, is what a developer runs between edits; CI runs everything."""
    for item in items:
        if item.get_closest_marker("runtime") is not None:
            item.add_marker(pytest.mark.slow)


def random_stage_order(row: list[Op], rng: np.random.Generator) -> list[Op]:
    """A random order of one stage's ops: forwards ascending, backwards ascending, every
    backward after the forward of its last sample (the family of docs/SIMNETS.md)."""
    F = [o for o in row if o.kind == "F"]
    Bk = [o for o in row if o.kind == "B"]
    out: list[Op] = []
    i = j = 0
    while i < len(F) or j < len(Bk):
        fwd_done = F[i - 1].stop if i else 0
        can_b = j < len(Bk) and Bk[j].stop <= fwd_done
        if i < len(F) and (not can_b or rng.random() < 0.5):
            out.append(F[i])
            i += 1
        else:
            out.append(Bk[j])
            j += 1
    return out
