"""The CP-SAT model of plan selection (docs/CERTIFY.md "The model").

Decision: per stage a forward composition of ``B`` (a path through sample boundaries
``0..B``: one boolean per sample range ``[a, b)``), a backward one (the same booleans in
stash mode), and a start time per chosen operation. Time is integer: every cost of
:class:`~umpipe_bench.problem.ProblemTables` is divided by the unit ``u`` and rounded down,
so every schedule's integer time is at most its true time divided by ``u`` (the recurrence is
monotone in every cost, docs/MODEL.md §4) and the solver's bound times ``u`` is a bound on
the true optimum. Constraints, per chosen range (docs/MODEL.md §3-4 dependencies):

* a forward ``[a, b)`` starts after the stage's forward of sample ``a-1`` and after the
  upstream activation transfer carrying sample ``b-1``;
* a backward ``[c, d)`` after the stage's backward of ``c-1``, its own forward of ``d-1``
  and the downstream gradient transfer carrying ``d-1``;
* each link direction carries its transfers one at a time in sample order, each after its
  operation;
* ``order="any"``: a stage runs one operation at a time (NoOverlap over its forwards and
  backwards); ``order="gpipe"``: its first backward starts after its last forward.

Under ``order="any"`` the first and the last stage (``S >= 2``) keep only the orders that
dominate (docs/CERTIFY.md "Dominant orders"): the first stage runs every forward before its
first backward, the last stage runs each backward as soon as the forward of its last sample
has run (before any later forward). Some optimal order of every plan is of this kind, so the
optimum is unchanged; both stages become chains, and only the stages between them need
NoOverlap.

Per sample ``t`` a variable holds (at least) the end of the operation or transfer carrying
``t``: set at the range's first sample and carried up by ``v[t] >= v[t-1]`` (true ends are
ascending, operations of one direction run in sample order). ``T >= `` every stage's last
backward end plus its optimizer step. A stash backward costs ``min(bwd, bwd * bwd_far)``
(docs/MODEL.md §1b), the cheaper of its near and far cost, so with ``bwd_far != 1`` the model
is a relaxation and its plan is re-simulated for the value.

This module imports no torch; it imports the solver only inside :func:`build`.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from ..problem import Problem
from .relax import relax_tables

__all__ = ["ORDERS", "Model", "build", "int_tables", "unit_for"]

#: "any": every order of a stage's operations the dependencies allow; "gpipe": all forwards
#: before the first backward (docs/MODEL.md §3).
ORDERS = ("any", "gpipe")


@dataclass
class Model:
    """The built model and its variables (``x``/``y``: forward/backward range booleans)."""

    cp: Any
    T: Any
    x: list[dict[tuple[int, int], Any]]
    y: list[dict[tuple[int, int], Any]]
    fs: list[dict[tuple[int, int], Any]]
    bs: list[dict[tuple[int, int], Any]]
    unit: float
    horizon: int
    extra: dict[str, Any] = field(default_factory=dict)


def int_tables(problem: Problem, mode: str, unit: float) -> dict[str, np.ndarray]:
    """Every cost table divided by ``unit`` and rounded down (int64)."""
    tb = problem.tables()
    back = np.minimum(tb.backward(mode), tb.backward_far(mode))

    def down(a: np.ndarray) -> np.ndarray:
        return np.floor(np.asarray(a, dtype=np.float64) / unit).astype(np.int64)

    return {"fwd": down(tb.fwd), "back": down(back), "act": down(tb.act), "grad": down(tb.grad),
            "opt": down(tb.opt)}


def _suffix_work(cost: np.ndarray) -> np.ndarray:
    """``out[s, n]``: the least cost of backwards covering ``n`` or more samples, i.e.
    ``min_{n' >= n}`` of the least composition cost of ``n'`` (min-plus knapsack)."""
    S, B1 = cost.shape
    best = np.zeros((S, B1), dtype=np.int64)
    for n in range(1, B1):
        best[:, n] = np.min(best[:, n - 1::-1][:, :n] + cost[:, 1:n + 1], axis=1)
    return np.minimum.accumulate(best[:, ::-1], axis=1)[:, ::-1]


def _ranges(B: int) -> list[tuple[int, int]]:
    return [(a, b) for a in range(B) for b in range(a + 1, B + 1)]


def _composition(cp: Any, lits: dict[tuple[int, int], Any], B: int) -> None:
    """``lits`` pick a composition of B: one path 0 -> B through the boundaries."""
    cp.add(sum(lits[(0, b)] for b in range(1, B + 1)) == 1)
    for n in range(1, B):
        inflow = sum(lits[(a, n)] for a in range(n))
        outflow = sum(lits[(n, b)] for b in range(n + 1, B + 1))
        cp.add(inflow == outflow)


def build(problem: Problem, mode: str, unit: float, horizon: int, order: str = "any",
          dominance: bool = True) -> Model:
    """The model of ``problem`` in ``mode`` on costs in units of ``unit`` seconds, every time
    in ``0..horizon`` (module docstring); ``dominance=False`` leaves the first and last
    stages every order too (the same optimum, a larger search)."""
    from ortools.sat.python import cp_model

    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    S, B = problem.S, problem.B
    it = int_tables(problem, mode, unit)
    fi, ci, ai, gi, oi = it["fwd"], it["back"], it["act"], it["grad"], it["opt"]
    cp = cp_model.CpModel()
    H = int(horizon)
    rng = _ranges(B)
    # the stage relaxation on the same integer costs: releases as domains, tails as cuts
    rx = relax_tables(fi, ci, ai, gi, oi, 0.0, tied=mode == "stash")

    def ivar(name: str, lo: float = 0.0) -> Any:
        return cp.new_int_var(min(int(lo), H), H, name)

    def samples(name: str, lows: Any = None) -> list[Any]:
        v = [ivar(f"{name}{t}", 0.0 if lows is None else lows[t]) for t in range(B)]
        for t in range(1, B):
            cp.add(v[t] >= v[t - 1])
        return v

    GF = [samples(f"gf{s}_", rx["fend"][s]) for s in range(S)]  # forward end carrying t
    GB = [samples(f"gb{s}_") for s in range(S)]  # backward end carrying t
    XA = [samples(f"xa{s}_", rx["rho"][s + 1]) for s in range(S - 1)]  # arrival of t at s+1
    YG = [None] + [samples(f"yg{s}_", rx["sigma"][s - 1]) for s in range(1, S)]  # at s-1
    T = cp.new_int_var(min(int(rx["bound"]) + 1, H), H, "T")
    for s in range(1, S):
        for t in range(B):  # after the gradient of t reaches stage s-1
            cp.add(T >= YG[s][t] + int(rx["lam"][s - 1][t]))
    suffix = _suffix_work(ci)
    for s in range(S):
        for t in range(B):  # every backward of samples t.. runs after the forward of t
            own = max(int(suffix[s, B - t]) + int(oi[s]), int(rx["lam"][s][t]))
            cp.add(T >= GF[s][t] + own)
            if s < S - 1:  # after the activation of t reaches stage s+1
                cp.add(T >= XA[s][t] + int(rx["kappa"][s + 1][t]))
    first_chain = order == "gpipe" or dominance  # forwards before backwards on stage 0
    eager_last = order == "any" and dominance and S >= 2
    xs, ys, fss, bss = [], [], [], []
    for s in range(S):
        gpipe_here = order == "gpipe" or (first_chain and s == 0)
        eager = eager_last and s == S - 1
        # eager: Z[p] >= the end of every backward ending at a boundary <= p
        Z = samples(f"z{s}_") if eager else None
        x = {r: cp.new_bool_var(f"x{s}_{r[0]}_{r[1]}") for r in rng}
        y = x if mode == "stash" else {r: cp.new_bool_var(f"y{s}_{r[0]}_{r[1]}") for r in rng}
        _composition(cp, x, B)
        if y is not x:
            _composition(cp, y, B)
        fs, bs, intervals = {}, {}, []
        for (a, b) in rng:
            m, lit = b - a, x[(a, b)]
            st = ivar(f"fs{s}_{a}_{b}")
            fs[(a, b)] = st
            intervals.append(cp.new_optional_fixed_size_interval_var(st, int(fi[s, m]), lit,
                                                                     f"F{s}_{a}_{b}"))
            end = st + int(fi[s, m])
            if a > 0:
                cp.add(st >= GF[s][a - 1]).only_enforce_if(lit)
            if s > 0:
                cp.add(st >= XA[s - 1][b - 1]).only_enforce_if(lit)
            if eager and a > 0:  # after every backward its forwards so far allow
                cp.add(st >= Z[a - 1]).only_enforce_if(lit)
            cp.add(GF[s][a] >= end).only_enforce_if(lit)
            if s < S - 1:
                cp.add(XA[s][a] >= end + int(ai[s, m])).only_enforce_if(lit)
                if a > 0:
                    cp.add(XA[s][a] >= XA[s][a - 1] + int(ai[s, m])).only_enforce_if(lit)
        for (c, d) in rng:
            m, lit = d - c, y[(c, d)]
            st = ivar(f"bs{s}_{c}_{d}")
            bs[(c, d)] = st
            intervals.append(cp.new_optional_fixed_size_interval_var(st, int(ci[s, m]), lit,
                                                                     f"B{s}_{c}_{d}"))
            end = st + int(ci[s, m])
            if c > 0:
                cp.add(st >= GB[s][c - 1]).only_enforce_if(lit)
            elif gpipe_here:
                cp.add(st >= GF[s][B - 1]).only_enforce_if(lit)
            cp.add(st >= GF[s][d - 1]).only_enforce_if(lit)
            if s < S - 1:
                cp.add(st >= YG[s + 1][d - 1]).only_enforce_if(lit)
            cp.add(GB[s][c] >= end).only_enforce_if(lit)
            if eager:
                cp.add(Z[d - 1] >= end).only_enforce_if(lit)
            if s > 0:
                cp.add(YG[s][c] >= end + int(gi[s - 1, m])).only_enforce_if(lit)
                if c > 0:
                    cp.add(YG[s][c] >= YG[s][c - 1] + int(gi[s - 1, m])).only_enforce_if(lit)
        if order == "any" and not (gpipe_here or eager):
            cp.add_no_overlap(intervals)  # the first and last stages are chains
        cp.add(T >= GB[s][B - 1] + int(oi[s]))
        # redundant: the stage's whole work after its earliest forward start
        head = sum(int(np.min(fi[k, 1:] + ai[k, 1:])) for k in range(s))
        cp.add(T >= head + int(oi[s])
               + sum(int(fi[s, b - a]) * x[(a, b)] for (a, b) in rng)
               + sum(int(ci[s, d - c]) * y[(c, d)] for (c, d) in rng))
        xs.append(x)
        ys.append(y)
        fss.append(fs)
        bss.append(bs)
    cp.minimize(T)
    return Model(cp, T, xs, ys, fss, bss, float(unit), H,
                 {"GF": GF, "GB": GB, "XA": XA, "YG": YG})


def unit_for(reference: float, resolution: float = 1e8) -> float:
    """The time unit: ``reference / resolution`` seconds (a power of two below it, so the
    scaled tables are exact binary fractions of the unit)."""
    if not math.isfinite(reference) or reference <= 0:
        raise ValueError(f"reference time must be positive and finite, got {reference!r}")
    return 2.0 ** math.floor(math.log2(reference / resolution))
