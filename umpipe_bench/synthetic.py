"""Synthetic problems: the paper's "simulation networks" (docs/MODEL.md §1).

A seeded generator of heterogeneous stages whose cost curves follow the shapes real hardware
shows, so that stages disagree about their best microbatch size:

* ``gpu``: flat until a knee (the device is under-occupied), then linear:
  ``t(m) = c0 + a * max(m, knee)``.
* ``cpu``: a fixed per-call overhead plus linear work: ``t(m) = c0 + a * m``.
* ``cache``: linear until the working set leaves a cache, then super-linear:
  ``t(m) = c0 + a * m * (1 + g * max(0, m - cache) / cache)``.

Backward curves are drawn from the same family with their own knee and a 1.5-2.5x slope, so
forward and backward prefer different sizes (what the dual chromosome exploits). Recompute
backward is forward + backward. Every size ``1..B`` is tabulated exactly (no interpolation
error). Links get a latency of 0.05-1 ms and 0.1-4 MB/sample at 1-10 GB/s.

This is the default family of the open names ``sim-s{S}-b{B}-s{seed}`` (:mod:`.simnames`);
the hardware-grounded families with a heterogeneity knob are in :mod:`.simnets`
(docs/SIMNETS.md).

This module imports no torch.
"""

from __future__ import annotations

import numpy as np

from .problem import Link, Problem, StageCosts, StageMemory

__all__ = [
    "FAMILIES", "SIM_BATCHES", "SIM_SEEDS", "SIM_STAGES", "SIM_TINY", "sim_name",
    "synthetic_problem",
]

FAMILIES = ("gpu", "cpu", "cache")
SIM_STAGES = (4, 8, 16, 32)
SIM_BATCHES = (16, 64, 256)
SIM_SEEDS = (0, 1)
# tiny instances whose exact optimum the ``exact`` planner can enumerate
SIM_TINY = ((2, 8), (3, 6))


def _curve(family: str, m: np.ndarray, c0: float, a: float, knee: float, g: float) -> np.ndarray:
    if family == "gpu":
        return c0 + a * np.maximum(m, knee)
    if family == "cpu":
        return c0 + a * m
    if family == "cache":
        return c0 + a * m * (1.0 + g * np.maximum(0.0, m - knee) / knee)
    raise ValueError(f"unknown cost family {family!r}; valid: {FAMILIES}")


def synthetic_problem(
    S: int,
    B: int,
    seed: int = 0,
    *,
    families: tuple[str, ...] = FAMILIES,
    name: str | None = None,
) -> Problem:
    """Draw a synthetic problem with ``S`` heterogeneous stages and mini-batch ``B``.

    Same arguments, same problem (``numpy.random.default_rng(seed)``, mixed with S and B).
    """
    if S < 1 or B < 1:
        raise ValueError(f"synthetic_problem needs S >= 1 and B >= 1, got S={S}, B={B}")
    for f in families:
        if f not in FAMILIES:
            raise ValueError(f"unknown cost family {f!r}; valid: {FAMILIES}")
    rng = np.random.default_rng([seed, S, B])
    m = np.arange(1, B + 1, dtype=np.float64)
    stages = []
    for s in range(S):
        fam = str(rng.choice(families))
        scale = float(rng.uniform(0.5, 2.0))  # heterogeneity across stages
        a = scale * 1e-3
        c0 = float(rng.uniform(0.2, 3.0)) * a * (4.0 if fam == "cpu" else 1.0)
        knee_f = float(rng.uniform(0.05, 0.5)) * B + 1.0
        knee_b = float(rng.uniform(0.05, 0.5)) * B + 1.0
        g = float(rng.uniform(0.5, 2.0))
        fwd = _curve(fam, m, c0, a, knee_f, g)
        bwd = _curve(fam, m, c0 * float(rng.uniform(1.0, 2.0)),
                     a * float(rng.uniform(1.5, 2.5)), knee_b, g)
        rbwd = fwd + bwd
        act = float(rng.uniform(0.1, 4.0)) * 2**20
        memory = StageMemory(
            param_bytes=float(rng.uniform(10, 400)) * 2**20,
            saved_act_bytes_per_sample=act * float(rng.uniform(2, 8)),
            input_bytes_per_sample=act,
        )
        stages.append(
            StageCosts(
                fwd=tuple(fwd.tolist()),
                bwd=tuple(bwd.tolist()),
                rbwd=tuple(rbwd.tolist()),
                opt=float(rng.uniform(0.5, 3.0)) * a,
                memory=memory,
                name=f"{fam}{s}",
                extra={"family": fam},
            )
        )
    links = []
    for s in range(S - 1):
        nbytes = stages[s + 1].memory.input_bytes_per_sample  # type: ignore[union-attr]
        links.append(
            Link(
                act_bytes=nbytes,
                grad_bytes=nbytes,
                latency=float(rng.uniform(5e-5, 1e-3)),
                bandwidth=float(rng.uniform(1.0, 10.0)) * 1e9,
            )
        )
    return Problem(
        name=name or sim_name(S, B, seed),
        B=B,
        sizes=tuple(range(1, B + 1)),
        stages=tuple(stages),
        links=tuple(links),
        provenance={
            "source": "synthetic",
            "device": "synthetic",
            "generator": "umpipe_bench.synthetic.synthetic_problem",
            "seed": seed,
            "families": list(families),
        },
        description=f"synthetic simulation network, S={S}, B={B}, seed={seed}",
    ).validate()


def sim_name(S: int, B: int, seed: int) -> str:
    """The name of the original generator's network ``sim-s{S}-b{B}-s{seed}``."""
    return f"sim-s{S}-b{B}-s{seed}"
