"""Problem providers: the committed profiles in ``umpipe_bench/problems/data`` and the synthetic
networks.

Registered through the ``umpipe_bench.problems`` entry point; importing this package does not
import torch (model definitions live in :mod:`umpipe_bench.problems.models`, imported lazily).
"""

from __future__ import annotations

from collections.abc import Callable
from functools import partial
from pathlib import Path

from umpipe_bench.problem import Problem
from umpipe_bench.simnames import sim_registry

DATA_DIR = Path(__file__).resolve().parent / "data"


def profiled() -> dict[str, Callable[[], Problem]]:
    """Every committed problem file ``umpipe_bench/problems/data/NAME.json``, by file stem."""
    return {p.stem: partial(Problem.load, p) for p in sorted(DATA_DIR.glob("*.json"))}


def synthetic() -> dict[str, Callable[[], Problem]]:
    """The listed simulation networks ``sim-s{S}-b{B}-s{seed}``; the mapping also resolves
    every other name of its patterns, including the hardware families (docs/SIMNETS.md)."""
    return sim_registry()
