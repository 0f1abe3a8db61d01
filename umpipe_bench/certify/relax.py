"""The stage relaxation: a lower bound that sees pipeline fill and drain with unequal sizes
(docs/CERTIFY.md "The stage relaxation").

Every stage in turn is solved exactly as one machine, its neighbours relaxed to per-sample
release and tail times computed by dynamic programs over compositions
(:mod:`._relax_kernels`):

* ``rho[s][t]``: earliest arrival at stage ``s`` of the activation carrying sample ``t``,
  ``fend[s][t]``: earliest end of stage ``s``'s forward carrying ``t`` (stage by stage
  downwards, each stage's forwards in sample order, one after the other);
* ``sigma[s][t]``: earliest arrival at stage ``s`` of the gradient carrying ``t`` (upwards:
  stage ``s+1``'s backwards in sample order, each after its forward and its own gradient, and,
  the larger, with its forwards and backwards on one machine);
* ``lam[s][t]``: least time from the arrival of ``t``'s gradient at stage ``s`` to the end of
  the iteration (stage 0 first: the stage's remaining backwards, each gradient's way down);
  for a target ``T``, with the stages above held to their gradient releases, the latest such
  arrival (``gradient_deadlines``).

For stage ``s`` a DP over states (samples forwarded, samples backwarded) finds the least
``T`` at which some order of its operations (forwards and backwards each in sample order, any
sizes, every backward after its own forward) meets those releases and tails; that ``T`` is at
most every schedule's ``T``. In stash mode a backward costs ``min(bwd, bwd * bwd_far)``, and
the stage DP leaves the backward sizes free of the forward ones on every stage but the last:
both only lower the bound. The last stage in stash mode (``tied``) is a chain
``F(1) B(1) F(2) B(2) ...`` over one composition (docs/CERTIFY.md "The last stage in stash
mode"), which also raises the gradient releases of the stage above it and the tails of its
activations.

The DPs take ``O(S B^3)`` steps, the gradient deadlines ``O(S^2 B^3)`` over every stage's
bisection; :data:`MAX_WORK` keeps the bound to problems where that is about a second (1.3 s at
``S = B = 64`` here; larger ones get ``None``, and :func:`umpipe_bench.bound.lower_bound` keeps
its closed form there).
"""

from __future__ import annotations

import numpy as np

from ..problem import Problem

__all__ = ["MAX_WORK", "relax_problem", "relax_tables", "relaxed_bound"]

#: Largest ``S * B^3`` the relaxation is computed for (B = 64 at S = 64).
MAX_WORK = 64 * 64**3
#: Bisection steps of each stage's DP.
ITERS = 48


def relaxed_bound(problem: Problem, mode: str, lo: float) -> float | None:
    """The stage relaxation's bound (module docstring), at least ``lo`` (a proven bound);
    None when ``S * B^3`` exceeds :data:`MAX_WORK`."""
    S, B = problem.S, problem.B
    if S * B**3 > MAX_WORK:
        return None
    return relax_problem(problem, mode, lo)["bound"]


def relax_problem(problem: Problem, mode: str, lo: float) -> dict:
    """:func:`relax_tables` on ``problem``'s tables in ``mode`` (a stash backward at the
    cheaper of its near and far cost), whatever its size."""
    tb = problem.tables()
    back = np.minimum(tb.backward(mode), tb.backward_far(mode))
    return relax_tables(tb.fwd, back, tb.act, tb.grad, tb.opt, lo, tied=mode == "stash")


def relax_tables(fwd: np.ndarray, back: np.ndarray, act: np.ndarray, grad: np.ndarray,
                 opt: np.ndarray, lo: float, tied: bool = False) -> dict:
    """The relaxation on cost tables (``[S, B+1]``; ``act``, ``grad``: ``[S-1, B+1]``):
    ``rho``, ``fend``, ``sigma``, ``lam``, ``kappa`` per stage, ``ftail[s][a, b]`` (the least
    time from the end of stage ``s``'s forward ``[a, b)`` to the end) and ``bound``; and what
    each stage's program reads: ``fwd`` and ``back`` (float64), per stage the gradient
    transfer it sends (``grad``, zero on stage 0) and its optimizer step (``opt``), and
    ``above``, the stacked tables of :func:`._relax_kernels.gradient_deadlines`.
    ``tied``: the backward sizes are the forward ones (stash mode): the last stage's chain, and
    every stage's gradient releases and forward tails over tied sizes (docs/CERTIFY.md)."""
    from . import _relax_kernels as k

    fwd = np.ascontiguousarray(fwd, dtype=np.float64)
    back = np.ascontiguousarray(back, dtype=np.float64)
    S, B = fwd.shape[0], fwd.shape[1] - 1
    zero = np.zeros(B + 1)
    act = [np.ascontiguousarray(act[s], dtype=np.float64) for s in range(S - 1)] + [zero]
    grad = [zero] + [np.ascontiguousarray(grad[s - 1], dtype=np.float64) for s in range(1, S)]
    opt = [float(o) for o in opt]
    rho = [np.zeros(B)]
    fend = []
    for s in range(S):
        end, out = k.forward_release(fwd[s], act[s], rho[s])
        fend.append(end)
        rho.append(out)
    sigma = [np.zeros(B) for _ in range(S)]
    for s in range(S - 1, 0, -1):
        sigma[s - 1] = np.maximum(  # each is a lower bound: the largest
            k.backward_release(back[s], grad[s], fend[s], sigma[s]),
            k.joint_backward_release(fwd[s], back[s], grad[s], rho[s], sigma[s]))
        if tied:
            sigma[s - 1] = np.maximum(sigma[s - 1], k.tied_backward_release(
                fwd[s], back[s], grad[s], rho[s], sigma[s]))
            if s == S - 1:  # the chain: one "backward" of fwd + back, released at rho
                sigma[s - 1] = np.maximum(sigma[s - 1], k.backward_release(
                    fwd[s] + back[s], grad[s], rho[s], np.zeros(B)))
    lam = [np.full(B, -np.inf)]  # lam[s + 1]: tails of stage s (lam[0]: none below 0)
    for s in range(S):
        lam.append(k.tails(back[s], grad[s], lam[s], opt[s]))
    ftail: list = [None] * S
    kappa: list = [None] * S + [np.full(B, -np.inf)]  # below the last stage: nothing
    for s in range(S - 1, -1, -1):
        ftail[s], kappa[s] = k.forward_tails(fwd[s], act[s], lam[s + 1], kappa[s + 1])
        if tied:
            ft, kp = k.chain_tails(fwd[s], back[s], grad[s], lam[s], opt[s])
            ftail[s], kappa[s] = np.maximum(ftail[s], ft), np.maximum(kappa[s], kp)
    best = float(lo)
    hi = max(2.0 * float(lo), 1e-12)
    # the stages above each stage, for its gradients' deadlines
    above = (back, np.array(grad), np.array(sigma), np.array(opt))
    for s in range(S):
        for chain in (False, True) if tied and s == S - 1 else (False,):
            v = k.stage_min_time(fwd[s], back[s], rho[s], sigma[s], grad[s], lam[s], opt[s],
                                 ftail[s], float(lo), hi, ITERS, *above, s, chain)
            best = max(best, float(v))
    return {"rho": rho[:S], "fend": fend, "sigma": sigma, "lam": lam[1:], "kappa": kappa[:S],
            "ftail": ftail, "bound": best, "fwd": fwd, "back": back, "grad": grad, "opt": opt,
            "above": above}
