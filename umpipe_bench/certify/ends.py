"""A lower bound that couples the last stage with the backward chains of the stage above it and
of the first stage (docs/CERTIFY.md "The end stages"), for problems of three or more stages.

The stage relaxation (:mod:`.relax`) gives every quantity its own best compositions: the first
stage's gradient releases assume the stages below deliver early samples in small microbatches,
while the last stage's own DP runs few large ones. Where the first stage ends the iteration
with a long optimizer step (gpt1-s4: 628 ms) that trade binds. This program keeps it:

* the last stage ``L = S-1`` is exact: its forward and backward compositions in its dominant
  order (docs/CERTIFY.md "Dominant orders"), forwards released at the relaxation's ``rho[L]``;
* the backward chain of stage ``M = S-2`` is exact: its composition, each microbatch started
  after the chain's previous one, the gradient of its last sample from ``L``, the earliest end
  of its own forward (``fend[M]``) and the relaxation's release ``sigma[M]``; its forwards
  between backwards are left out (they only delay it);
* the stages ``M-1 .. 1`` are a delay: ``n`` samples whose gradients reach stage ``M-1``
  together are at stage 0 no earlier than ``D(n)`` later (one of those stages runs all ``n``
  at its cheapest cover of ``n`` samples, the others one microbatch each at their cheapest,
  plus each link's cheapest transfer);
* the backward chain of stage 0 is exact: every forward first (its dominant order), then its
  composition, each microbatch after the previous one and the arrival of its last sample's
  gradient (at least the relaxation's ``sigma[0]``).

``T`` is at least the end of each chain plus its stage's optimizer step and, for every backward
of stage ``M``, its end plus the gradient's transfer plus the relaxation's tail ``lam[M-1]`` of
each of its samples.

A state is ``(c, k, k0, x2, j0, x0)``: the last stage has forwarded ``[0, c)`` and backwarded
``[0, k)``, its last backward ``[k0, k)``; stage ``M`` has backwarded ``[0, x2)``, its last
microbatch ``[j0, x2)``; stage 0 has backwarded ``[0, x0)``. A stage-``M`` microbatch is taken
only while its last sample is in the last stage's last backward, and a stage-0 one while its
last sample is in stage ``M``'s last microbatch: every schedule's operations can be put in that
order (each chain moves just after the microbatch its last sample waits for), so each schedule
follows one path with times no later than its own. A state carries the last stage's end, the
arrival of its last gradient at ``M``, stage ``M``'s end, stage 0's end and the tail so far;
every completion's ``T`` is non-decreasing in each, so a state no smaller in all five than
another of its key is dropped, and one whose least possible ``T`` (each chain's remaining work
at its cheapest; the last sample's way to stage 0) reaches ``upper`` too.

The least ``T`` found (``upper`` when none is below it) is a lower bound on every plan and
order of the memory mode (stash: a backward the cheaper of its near and far cost, the backward
sizes free of the forward ones). Pure Python: about 55 s on gpt1-s4 (``S = 4``, ``B = 16``,
3 million states), 240 s on vgg16-s4 (``B = 32``, 10 million, pruned at its best known value).
"""

from __future__ import annotations

import math
import time

import numpy as np

from ..problem import Problem
from .two_stage import TwoStage

__all__ = ["CAPACITY", "MAX_B", "end_stage_tables", "end_stages_bound"]

INF = math.inf
#: The largest batch :func:`umpipe_bench.certify.solve.certify` runs the program for.
MAX_B = 32
#: Most states the program adds; beyond it it stops unfinished (gpt1-s4 adds 2 million).
CAPACITY = 20_000_000


def _least(cost: np.ndarray) -> list[float]:
    """``out[n]``: the least cost of ``n`` consecutive samples in microbatches of ``cost``
    (one stage's :func:`umpipe_bench.bound.min_composition_costs`)."""
    from ..bound import min_composition_costs

    return min_composition_costs(np.asarray(cost)[None])[0].tolist()


def _delays(problem: Problem, back: np.ndarray, B: int) -> list[float]:
    """``D[n]``: the least time from ``n`` samples' gradients leaving stage ``M = S-2`` together
    (the end of its microbatch) to the arrival of the last of them at stage 0 (module
    docstring); ``D[0] = 0``."""
    tb = problem.tables()
    S = problem.S
    mids = list(range(S - 3, 0, -1))  # the stages between M and 0, top down
    gmin = {s: float(np.min(tb.grad[s - 1][1:])) for s in range(1, S)}  # s -> s-1
    single = {s: float(np.min(back[s][1:])) for s in mids}
    cover = {}
    for s in mids:  # the least cost of a composition covering at least n samples
        least = _least(back[s])
        cover[s] = [min(least[n:]) for n in range(B + 1)]
    base = gmin[S - 2] + sum(gmin[s] for s in mids)
    D = [0.0]
    for n in range(1, B + 1):
        worst = 0.0
        for s in mids:
            worst = max(worst, sum(cover[q][n] if q == s else single[q] for q in mids))
        D.append(base + worst)
    return D


def end_stage_tables(problem: Problem, mode: str, rx: dict) -> dict:
    """What the program reads (module docstring), from ``problem``'s tables in ``mode`` and
    its stage relaxation ``rx`` (:func:`.relax.relax_problem`): the last stage ``L``'s forward
    and backward costs ``fL``, ``bL``, its releases ``rho`` and gradient transfers ``gL``;
    stage ``M``'s backward costs ``bM``, gradient transfers ``gM``, forward ends ``fendM`` and
    releases ``sigM``; stage 0's backward costs ``b0`` and releases ``sig0``; the optimizer
    steps ``optL``, ``optM``, ``opt0``; ``lamax[x, y]``, the largest tail below ``M`` of the
    samples ``[x, y)``; the delays ``D``; ``F0``, stage 0's forwards; ``rest*[n]``, the least
    cost of the samples ``[n, B)`` (``L``'s forwards and backwards, ``M``'s and 0's
    backwards); ``minM``, ``min0``, the cheapest backward of ``M`` and of 0."""
    S, B = problem.S, problem.B
    tb = problem.tables()
    back = rx["back"]
    L, M = S - 1, S - 2

    def arr(v) -> np.ndarray:
        return np.array([float(x) for x in v])

    lam = [float(v) for v in rx["lam"][M - 1]]  # from the arrival of a gradient at M-1
    lamax = np.full((B + 1, B + 1), -INF)
    for x in range(B + 1):
        for y in range(x + 1, B + 1):
            lamax[x, y] = max(lam[x:y])
    restLf, restLb, restM, rest0 = (arr(_least(c)[::-1]) for c in (tb.fwd[L], back[L],
                                                                   back[M], back[0]))
    return {"fL": arr(tb.fwd[L]), "bL": arr(back[L]), "bM": arr(back[M]), "b0": arr(back[0]),
            "gL": arr(tb.grad[L - 1]), "gM": arr(tb.grad[M - 1]), "optL": float(tb.opt[L]),
            "optM": float(tb.opt[M]), "opt0": float(tb.opt[0]), "rho": arr(rx["rho"][L]),
            "fendM": arr(rx["fend"][M]), "sigM": arr(rx["sigma"][M]),
            "sig0": arr(rx["sigma"][0]), "lamax": lamax, "D": arr(_delays(problem, back, B)),
            "F0": float(_least(tb.fwd[0])[B]), "restLf": restLf, "restLb": restLb,
            "restM": restM, "rest0": rest0, "minM": float(min(back[M][1:])),
            "min0": float(min(back[0][1:]))}


def end_stages_bound(problem: Problem, mode: str, upper: float = INF,
                     deadline: float | None = None) -> TwoStage:
    """The program's least ``T`` below ``upper`` (module docstring), a lower bound on ``T`` of
    every ``mode`` plan and order of ``problem`` (``S >= 3``); ``T`` is inf when nothing is
    below ``upper`` (then ``upper`` is the bound). ``deadline``: a ``time.perf_counter()``
    value after which it stops unfinished (also once it has added more than :data:`CAPACITY`
    states). No plan."""
    from ..bound import stage_bound
    from .relax import relax_problem

    S, B = problem.S, problem.B
    if S < 3:
        raise ValueError(f"the end-stages program needs S >= 3, got S = {S}")
    t = end_stage_tables(problem, mode,
                         relax_problem(problem, mode, stage_bound(problem, mode).value))
    fL, bL, bM, b0, gL, gM = (t[k].tolist() for k in ("fL", "bL", "bM", "b0", "gL", "gM"))
    optL, optM, opt0, F0, minM, min0 = (t[k] for k in ("optL", "optM", "opt0", "F0", "minM",
                                                       "min0"))
    rho, fendM, sigM, sig0, D = (t[k].tolist() for k in ("rho", "fendM", "sigM", "sig0", "D"))
    restLf, restLb, restM, rest0 = (t[k].tolist() for k in ("restLf", "restLb", "restM",
                                                            "rest0"))
    lamax = t["lamax"].tolist()
    layers: list[dict | None] = [{} for _ in range(4 * B + 1)]  # by c + k + x2 + x0
    kept = [0, 0]  # values added, largest layer

    def add(key: tuple[int, int, int, int, int, int], v: tuple) -> None:
        c, k, _, x2, _, x0 = key
        eL, _, eM, e0, tail = v
        restL = eL + restLf[c] + restLb[k]
        least = max(tail, restL + optL, eM + restM[x2] + optM, e0 + rest0[x0] + opt0)
        if x2 < B:  # the last sample: stage M's last microbatch, the way down, stage 0's
            least = max(least, max(eM + restM[x2], restL + minM) + D[1] + min0 + opt0)
        if least >= upper:
            return
        front = layers[c + k + x2 + x0].setdefault(key, [])  # type: ignore[union-attr]
        for w in front:
            if w[0] <= eL and w[1] <= v[1] and w[2] <= eM and w[3] <= e0 and w[4] <= tail:
                return
        front[:] = [w for w in front if not (eL <= w[0] and v[1] <= w[1] and eM <= w[2]
                                             and e0 <= w[3] and tail <= w[4])]
        front.append(v)
        kept[0] += 1

    add((0, 0, 0, 0, 0, 0), (0.0, -INF, -INF, F0, -INF))
    best = INF
    for n in range(len(layers)):
        if deadline is not None and time.perf_counter() > deadline:
            return TwoStage(INF, None, False, {"states": kept[0], "layer": kept[1]})
        layer, layers[n] = layers[n], None
        assert layer is not None
        kept[1] = max(kept[1], sum(map(len, layer.values())))
        if kept[0] > CAPACITY:
            return TwoStage(INF, None, False, {"states": kept[0], "layer": kept[1]})
        for (c, k, k0, x2, j0, x0), front in layer.items():
            for v in front:
                eL, G, eM, e0, tail = v
                # stage 0 backward [x0, y), y - 1 in stage M's last microbatch [j0, x2)
                for y in range(max(x0, j0) + 1, x2 + 1):
                    e = max(e0, eM + D[y - j0], sig0[y - 1]) + b0[y - x0]
                    if y == B:  # then x2 = k = c = B: every chain is done
                        best = min(best, max(e + opt0, tail, eM + optM))
                        continue
                    add((c, k, k0, x2, j0, y), (eL, G, eM, e, tail))
                # stage M backward [x2, y), y - 1 in the last stage's last backward [k0, k)
                for y in range(max(x2, k0) + 1, k + 1):
                    e = max(eM, G, fendM[y - 1], sigM[y - 1]) + bM[y - x2]
                    add((c, k, k0, y, x2, x0),
                        (eL, G, e, e0, max(tail, e + gM[y - x2] + lamax[x2][y])))
                # the last stage: a forward [c, d), or a backward [k, d) of forwarded samples
                for d in range(c + 1, B + 1):
                    add((d, k, k0, x2, j0, x0),
                        (max(eL, rho[d - 1]) + fL[d - c], G, eM, e0, tail))
                for d in range(k + 1, c + 1):
                    e = eL + bL[d - k]
                    add((c, d, k, x2, j0, x0),
                        (e, e + gL[d - k], eM, e0, tail if d < B else max(tail, e + optL)))
    return TwoStage(best if best < upper else INF, None, True,
                    {"states": kept[0], "layer": kept[1]})
