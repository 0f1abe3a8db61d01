"""Backward locality: a stash backward that does not directly follow its own forward
(docs/MODEL.md §1b).

The engine times every stash backward right after its own forward (docs/MODEL.md §1), the
*near* order. GPipe runs all of a stage's forwards before its first backward, the *far* order,
and its backwards find their activations evicted from the caches. This module times one stage
in both orders on the same microbatches, the reference EDP(M) split of the stage's input
(``M = min(4, B)``):

* ``near``: ``F(1) B(1) F(2) B(2) ... F(M) B(M)``;
* ``far``: ``F(1) ... F(M) B(1) ... B(M)``;

and the stage's factor ``bwd_far`` is the median over rounds of the per-round ratio of the
summed backward times, far over near. The profiler runs one such pair per stage inside each of
its rounds (:func:`.engine.measure_cells`), so the co-run conditions are those of the other
cells; ``scripts/backward_locality.py`` runs the same pairs alone, with a bootstrap interval.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from ..plan import balanced_split
from ..problem import BWD_FAR_RANGE
from .rig import stage_backward, stage_forward

__all__ = ["REFERENCE_M", "LocalityRound", "far_factor", "locality_round", "order_pass",
           "reference_sizes"]

#: microbatches of the reference split (fewer when B is smaller)
REFERENCE_M = 4


@dataclass(frozen=True)
class LocalityRound:
    """Summed forward and backward seconds of one near and one far pass."""

    near_fwd: float
    near_bwd: float
    far_fwd: float
    far_bwd: float

    @property
    def ratio(self) -> float:
        """far / near summed backward time of this round."""
        return self.far_bwd / self.near_bwd


def reference_sizes(B: int) -> tuple[int, ...]:
    """The reference microbatches: EDP(min(4, B)) of the mini-batch, larger first."""
    return balanced_split(B, min(REFERENCE_M, B))


def order_pass(rig: Any, sizes: Sequence[int], loss_fn: Callable[[Any, Any], Any], clock: Any,
               order: str) -> tuple[float, float]:
    """Summed forward and backward seconds of the microbatches ``sizes`` (consecutive samples
    of the stage input ``rig``, a :class:`.rig.StageRig`) run in ``order``: ``near`` or
    ``far`` (module docstring)."""
    if order not in ("near", "far"):
        raise ValueError(f"order must be 'near' or 'far', got {order!r}")
    starts = [sum(sizes[:j]) for j in range(len(sizes))]
    f_marks: list[tuple[Any, Any]] = []
    b_marks: list[tuple[Any, Any]] = []

    def fwd(j: int) -> Any:
        t0 = clock.mark()
        _, out = stage_forward(rig, sizes[j], loss_fn, starts[j])
        f_marks.append((t0, clock.mark()))
        return out

    def bwd(j: int, out: Any) -> None:
        t0 = clock.mark()
        stage_backward(rig, out, sizes[j], starts[j])
        b_marks.append((t0, clock.mark()))

    clock.sync()
    if order == "near":
        for j in range(len(sizes)):
            bwd(j, fwd(j))
    else:
        outs = [fwd(j) for j in range(len(sizes))]
        for j, out in enumerate(outs):
            bwd(j, out)
        del outs
    clock.sync()
    return (sum(clock.seconds(a, b) for a, b in f_marks),
            sum(clock.seconds(a, b) for a, b in b_marks))


def locality_round(rig: Any, sizes: Sequence[int], loss_fn: Callable[[Any, Any], Any],
                   clock: Any, round_index: int) -> LocalityRound:
    """One near and one far pass; the near pass first in even rounds, last in odd ones."""
    res: dict[str, tuple[float, float]] = {}
    for order in (("near", "far") if round_index % 2 == 0 else ("far", "near")):
        res[order] = order_pass(rig, sizes, loss_fn, clock, order)
    return LocalityRound(*res["near"], *res["far"])


def far_factor(rounds: Sequence[LocalityRound]) -> tuple[float, float]:
    """``(factor, raw)``: the median over rounds of far/near summed-backward ratios, clamped
    into the range a problem file accepts (``raw``: before clamping)."""
    raw = statistics.median(r.ratio for r in rounds)
    lo, hi = BWD_FAR_RANGE
    return min(max(raw, lo), hi), raw
