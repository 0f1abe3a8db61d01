"""Open names of simulation networks (docs/SIMNETS.md, "Names").

Two patterns, any size within the limits, generated on demand:

* ``sim-s{S}-b{B}-s{seed}``: the original generator (:mod:`.synthetic`), numbers unchanged;
* ``sim-{family}[-dc]-s{S}-b{B}-h{h}-s{seed}``: a hardware-grounded family (:mod:`.simnets`)
  at heterogeneity ``h`` in [0, 1]; ``-dc`` is the decorrelated-backward variant.

:class:`OpenNames` is what the ``synthetic`` problem provider returns: a mapping of the listed
names (the fixed grid the benchmark matrices glob over) that also resolves any other name of
the patterns (:mod:`.registry` asks it for names it does not list).

This module imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from functools import partial

from .problem import LIMITS as PROBLEM_LIMITS
from .problem import Problem, ProblemError
from .schema import SEED_RANGE
from .simnets import FAMILIES, family_name, family_problem
from .synthetic import SIM_BATCHES, SIM_SEEDS, SIM_STAGES, SIM_TINY, sim_name, synthetic_problem

__all__ = [
    "LIMITS", "PATTERNS", "OpenNames", "family_name", "parse_sim_name", "sim_name",
    "sim_registry",
]

#: Inclusive limits of the open names: ``(low, high)``.
LIMITS = {**PROBLEM_LIMITS, "seed": SEED_RANGE}
PATTERNS = (
    "sim-s{S}-b{B}-s{seed}",
    "sim-{family}[-dc]-s{S}-b{B}-h{h}-s{seed}",
)
_LEGACY = re.compile(r"^sim-s(\d+)-b(\d+)-s(\d+)$")
_FAMILY = re.compile(r"^sim-([a-z]+)(-dc)?-s(\d+)-b(\d+)-h(\d+(?:\.\d+)?)-s(\d+)$")


def _check(name: str, field: str, value: int) -> int:
    lo, hi = LIMITS[field]
    if not lo <= value <= hi:
        raise ProblemError(
            f"problem name {name!r}: {field} must be in {lo}..{hi}, got {value}")
    return value


def parse_sim_name(name: str) -> Callable[[], Problem] | None:
    """A loader for a simulation-network name, or None when the name fits no pattern.

    A name that fits a pattern but breaks a limit raises :class:`ProblemError` naming the
    field and the expected range.
    """
    key = name.lower()
    m = _LEGACY.match(key)
    if m:
        S, B, seed = (_check(name, f, int(v)) for f, v in zip(("S", "B", "seed"), m.groups()))
        return partial(synthetic_problem, S, B, seed)
    m = _FAMILY.match(key)
    if not m:
        return None
    family, dc, S_, B_, h_, seed_ = m.groups()
    if family not in FAMILIES:
        raise ProblemError(
            f"problem name {name!r}: unknown family {family!r}; expected one of "
            f"{', '.join(FAMILIES)}")
    S, B, seed = _check(name, "S", int(S_)), _check(name, "B", int(B_)), _check(
        name, "seed", int(seed_))
    h = float(h_)
    if not 0.0 <= h <= 1.0:
        raise ProblemError(f"problem name {name!r}: h must be in [0, 1], got {h_}")
    return partial(family_problem, family, S, B, h, seed, decorrelated=bool(dc))


class OpenNames(dict):  # type: ignore[type-arg]
    """Listed names (``name -> loader``) plus every other name of :data:`PATTERNS`."""

    patterns: tuple[str, ...] = PATTERNS

    def resolve(self, name: str) -> Callable[[], Problem] | None:
        """A loader for ``name`` if it fits a pattern (limits checked), else None."""
        return self.get(name.lower()) or parse_sim_name(name)


def sim_registry() -> dict[str, Callable[[], Problem]]:
    """The listed synthetic instances ``sim-s{S}-b{B}-s{seed}`` (generated on demand): every
    S in SIM_STAGES x B in SIM_BATCHES, plus the tiny SIM_TINY ones for exact optima.

    The returned :class:`OpenNames` also resolves every other name of its patterns (any size
    and seed within the limits, and the hardware families of docs/SIMNETS.md)."""
    shapes = [(S, B) for S in SIM_STAGES for B in SIM_BATCHES] + list(SIM_TINY)
    return OpenNames({
        sim_name(S, B, seed): (lambda S=S, B=B, seed=seed: synthetic_problem(S, B, seed))
        for S, B in shapes
        for seed in SIM_SEEDS
    })
