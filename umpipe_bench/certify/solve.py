"""One certified solve: a time-limited CP-SAT run of :mod:`.model`, its plan re-simulated
(docs/CERTIFY.md "Certificates").

:func:`certify` returns a :class:`Certificate`: ``bound``, a proven lower bound on T of every
plan of the memory mode under the model's orders (the solver's best bound on costs rounded
down, times the unit, and never below :func:`umpipe_bench.bound.lower_bound`); ``value``, T of
the best plan known at the end (a hint or the solver's solution) re-simulated by
:func:`umpipe_bench.simulator.simulate` on the true costs; ``optimal`` when
``value - bound <= OPT_TOL * value``. The solver runs in a thread: the run's clock
(:mod:`umpipe_bench.planners.evaluation.clock`) caps its time limit, and SIGINT or SIGTERM stop
it within a fraction of a second, keeping what it has proven so far.

This module imports no torch.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from ..errors import SolverMissing, UserInputError
from ..plan import Plan
from ..problem import Problem
from ..schedules import Op, build_schedule, capped_order
from ..simulator import simulate
from .ends import MAX_B as ENDS_MAX_B
from .ends import end_stages_bound
from .model import ORDERS, build, unit_for
from .two_stage import (
    MAX_B,
    recompute_program_applies,
    two_stage_recompute,
    two_stage_recompute_bound,
    two_stage_stash,
)

__all__ = ["OPT_TOL", "Certificate", "SolverMissing", "certify", "dominant_order",
           "require_solver", "simulate_order"]

#: ``optimal`` means value and bound agree to this relative tolerance: what rounding the
#: costs down to units of ``value / 2^26`` or less can lose along a critical path of at most
#: ``4 S B + S`` costs, for every problem with ``4 S B + S <= 600``.
OPT_TOL = 1e-5
#: Integer units per reference time (:func:`.model.unit_for`).
RESOLUTION = 1e8
#: The share of the time limit the end-stages program may take before the solver starts.
ENDS_SHARE = 0.5
#: Most decision solves after the search (:func:`_decide`).
DECISIONS = 12
#: Relative allowance for float rounding between the two-stage program and the simulator
#: (each adds and compares the same costs, in another order).
DP_SLACK = 1e-9


def require_solver() -> None:
    """Raise :class:`SolverMissing` (one line) when OR-Tools' CP-SAT cannot be imported."""
    try:
        from ortools.sat.python import cp_model  # noqa: F401
    except ImportError:
        raise SolverMissing("the CP-SAT solver is not installed: pip install "
                            "'umpipe-bench[certify]' (OR-Tools)") from None


@dataclass
class Certificate:
    """What one solve proved (module docstring); times in seconds."""

    problem: str
    mode: str
    order: str
    value: float
    bound: float
    status: str
    plan: Plan
    #: per-stage op labels of ``plan``'s order (the solver's, or the hint's schedule)
    ops: list[list[str]]
    #: whether ``value`` is the solver's own solution (else the best hint)
    from_solver: bool
    wall: float
    unit: float
    stats: dict[str, Any] = field(default_factory=dict)

    @property
    def optimal(self) -> bool:
        return self.value - self.bound <= OPT_TOL * self.value

    @property
    def gap(self) -> float:
        """``value / bound - 1``."""
        return self.value / self.bound - 1.0 if self.bound > 0 else math.inf


def simulate_order(problem: Problem, plan: Plan, ops: list[list[Op]]) -> float:
    """T of ``plan`` run in the given per-stage orders (the reference simulator)."""
    return float(simulate(problem, plan, schedule="orders", ops=ops).iteration_time)


def dominant_order(ops: list[list[Op]]) -> list[list[Op]]:
    """``ops`` with the first stage's forwards all before its backwards and the last stage's
    backwards each as early as its forwards allow (docs/CERTIFY.md "Dominant orders"): never
    a later T (``S >= 2``; a single stage is left as it is)."""
    if len(ops) < 2:
        return [list(row) for row in ops]
    first = [o for o in ops[0] if o.kind == "F"] + [o for o in ops[0] if o.kind == "B"]
    fw = [o for o in ops[-1] if o.kind == "F"]
    bw = [o for o in ops[-1] if o.kind == "B"]
    last: list[Op] = []
    j = 0
    for f in fw:
        last.append(f)
        while j < len(bw) and bw[j].stop <= f.stop:
            last.append(bw[j])
            j += 1
    return [first, *[list(row) for row in ops[1:-1]], last + bw[j:]]


def _hint_orders(plan: Plan, order: str) -> list[list[list[Op]]]:
    """The orders of a hint plan: GPipe's, or (order ``any``) its capped order and that
    order's dominant form (the model's; the simulator's near/far backward costs may still
    favour the first)."""
    if order == "gpipe":
        return [build_schedule("gpipe", plan.with_caps(None))]
    o = capped_order(plan, plan.effective_caps())
    return [o, dominant_order(o)]


def _extract(problem: Problem, mode: str, solver: Any, m: Any) -> tuple[Plan, list[list[Op]]]:
    """The solver's plan and per-stage order (operations sorted by start)."""
    S = problem.S
    fwd, bwd, ops = [], [], []
    for s in range(S):
        P = sorted(r for r, lit in m.x[s].items() if solver.boolean_value(lit))
        Q = sorted(r for r, lit in m.y[s].items() if solver.boolean_value(lit))
        fwd.append(tuple(b - a for a, b in P))
        bwd.append(tuple(d - c for c, d in Q))
        row = [(solver.value(m.fs[s][r]), 0, j, Op("F", s, j, *r)) for j, r in enumerate(P)]
        row += [(solver.value(m.bs[s][r]), 1, j, Op("B", s, j, *r)) for j, r in enumerate(Q)]
        ops.append([o for *_, o in sorted(row, key=lambda t: t[:3])])
    plan = Plan(tuple(fwd), tuple(bwd), mode)
    return plan, ops


def _run(solver: Any, cp: Any, clock: Any) -> int:
    """``solver.solve(cp)`` in a thread; signals and the clock's deadline stop the search."""
    out: dict[str, int] = {}
    th = threading.Thread(target=lambda: out.setdefault("status", solver.solve(cp)), daemon=True)
    th.start()
    try:
        while th.is_alive():
            th.join(0.1)
            if clock is not None and clock.expired():
                solver.stop_search()
    except BaseException:
        solver.stop_search()
        th.join()
        raise
    return out["status"]


def certify(problem: Problem, mode: str, *, order: str = "any", time_limit: float = 60.0,
            workers: int = 1, hints: list[Plan] | None = None, clock: Any = None,
            seed: int = 0, params: dict[str, Any] | None = None,
            decide: float = 0.0, max_decisions: int = DECISIONS,
            programs: bool = True, split: float = 0.0,
            progress: Callable[[str], None] | None = None) -> Certificate:
    """Solve ``problem`` in ``mode`` over ``order`` (:data:`.model.ORDERS`) for at most
    ``time_limit`` seconds (less if ``clock`` ends sooner); ``hints``: plans whose values
    bound the horizon and whose best one starts the search (default: the best GPipe EDP);
    ``params``: further CP-SAT parameters of the search (``linearization_level``, ...);
    ``decide`` > 0:
    then up to ``max_decisions`` decision solves of at most ``decide`` seconds each
    (:func:`_decide`) when the search ends short of optimal. ``programs``: a two-stage
    stash problem (``B <= MAX_B``, order ``any``) is solved by the exact program of
    :mod:`.two_stage` instead of the solver (the solver when the program does not finish
    within ``time_limit``), and so is a recompute one whose transfers are never longer than a
    stage-0 forward; otherwise, or when that program does not finish, a recompute one first
    gets the bound program's bound, which ends the solve when it proves the best hint optimal
    and otherwise joins the solver's; a problem of three or more stages (``B <=``
    :data:`.ends.MAX_B`) gets the end-stages program's bound (:mod:`.ends`) the same way,
    within :data:`ENDS_SHARE` of ``time_limit`` (False: the solver alone). The programs and
    the search share ``time_limit``: each gets what the ones before it left (the search at
    least 0.01 s). ``split`` > 0: then, when still short of optimal, the last-stage split
    (:func:`_split`, docs/CERTIFY.md "The last-stage split"): one solve of at most ``split``
    seconds per last-stage partition the stage relaxation leaves below the best value.
    ``progress``: called with one line per step of the split."""
    from ..bound import lower_bound

    require_solver()
    from ortools.sat.python import cp_model

    if order not in ORDERS:
        raise UserInputError(f"order must be one of {', '.join(ORDERS)}, got {order!r}")
    if not (time_limit > 0 and math.isfinite(time_limit)):
        raise UserInputError(f"time limit must be a positive number of seconds, got "
                             f"{time_limit!r}")
    if not (decide >= 0 and math.isfinite(decide)):
        raise UserInputError(f"decision time must be a non-negative number of seconds, got "
                             f"{decide!r}")
    if not (split >= 0 and math.isfinite(split)):
        raise UserInputError(f"split time must be a non-negative number of seconds, got "
                             f"{split!r}")
    t_start = time.perf_counter()
    S, B = problem.S, problem.B
    cands = list(hints or []) + [Plan.edp(S, B, M, mode) for M in range(1, B + 1)]
    best_plan, best_ops, best_T = None, None, math.inf
    hint_ops: list[list[Op]] = []
    for p in cands:
        if p.mode != mode:
            continue
        orders = _hint_orders(p, order)
        Ts = [simulate_order(problem, p, o) for o in orders]
        k = min(range(len(Ts)), key=Ts.__getitem__)
        if Ts[k] < best_T:
            best_plan, best_ops, best_T, hint_ops = p, orders[k], Ts[k], orders[-1]
    assert best_plan is not None and best_ops is not None
    dp_bound, dp_stats = -math.inf, {}
    # a program's proven bound, then the solver: (method, program, share of the time limit)
    bound_program: tuple[str, Any, float] | None = None
    if programs and order == "any" and S == 2 and B <= MAX_B:
        if mode == "stash":
            c = _two_stage(problem, best_plan, best_ops, best_T, t_start, time_limit, clock)
            if c is not None:
                return c
        else:
            if recompute_program_applies(problem):
                c = _two_stage(problem, best_plan, best_ops, best_T, t_start, time_limit,
                               clock, "recompute")
                if c is not None:
                    return c
            bound_program = ("two-stage bound", two_stage_recompute_bound, 1.0)
    elif programs and order == "any" and S >= 3 and B <= ENDS_MAX_B:
        bound_program = ("end-stages dp", lambda p, *rest: end_stages_bound(p, mode, *rest),
                         ENDS_SHARE)
    if bound_program is not None:
        method, program, share = bound_program
        upper = best_T * (1.0 + DP_SLACK)
        r = program(problem, upper, _deadline(t_start, share * time_limit, clock))
        if r.finished:
            dp_bound = min(r.T, upper) * (1.0 - DP_SLACK)
            dp_stats = {"method": method, **r.stats}
            if best_T - dp_bound <= OPT_TOL * best_T:
                return _program_certificate(problem, mode, best_plan, best_ops, best_T,
                                            dp_bound, False, t_start, dp_stats)
    unit = unit_for(best_T, RESOLUTION)
    horizon = math.ceil(best_T / unit) + 1
    m = build(problem, mode, unit, horizon, order)
    for s in range(S):  # the best hint as the solver's first solution
        for lits, chosen in _stage_ranges(m, s, mode, best_plan.fwd[s], best_plan.bwd[s]):
            for r, lit in lits.items():
                m.cp.add_hint(lit, r in chosen)
    tl = simulate(problem, best_plan, schedule="orders", ops=hint_ops)  # the model's form
    for op in tl.ops:
        if op.kind in "FB":
            starts = m.fs if op.kind == "F" else m.bs
            m.cp.add_hint(starts[op.stage][(op.start, op.stop)], int(op.t0 / unit))
    solver = cp_model.CpSolver()
    # what a two-stage program left of the time limit (it shares one limit with the search)
    limit = max(0.01, _deadline(t_start, time_limit, clock) - time.perf_counter())
    solver.parameters.max_time_in_seconds = limit
    solver.parameters.num_workers = int(workers)
    solver.parameters.random_seed = int(seed)
    for key, value in (params or {}).items():
        setattr(solver.parameters, key, value)
    status = _run(solver, m.cp, clock)
    name = solver.status_name(status)
    from_solver = False
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        plan, ops = _extract(problem, mode, solver, m)
        T = simulate_order(problem, plan, ops)
        if T < best_T:
            best_plan, best_ops, best_T, from_solver = plan, ops, T, True
    bound = lower_bound(problem, mode)
    solver_bound = -math.inf
    if status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
        solver_bound = float(solver.best_objective_bound) * unit
        bound = max(bound, solver_bound)
    elif status == cp_model.INFEASIBLE:  # the hint is a solution on the rounded costs
        raise RuntimeError(f"certify: the model of {problem.name!r} ({mode}) is infeasible "
                           "below its hint's time (a bug)")
    stats = {"conflicts": solver.num_conflicts, "branches": solver.num_branches,
             "solver_bound": solver_bound, "decisions": []}
    if dp_bound > bound:  # a program proved more than the search
        bound = dp_bound
        stats.update(dp_stats, solver_bound=dp_bound)
    # decisions, then the split, each while short of optimal: a faster schedule either one
    # finds replaces ``best``, a higher bound it proves replaces ``bound``
    best = {"T": best_T, "plan": best_plan, "ops": best_ops, "from_solver": from_solver}

    def short() -> bool:
        return best["T"] - bound > OPT_TOL * best["T"]

    def settle(proved: float, flag: str | None = None) -> None:
        nonlocal bound, name
        if proved > bound:
            bound = proved
            stats["solver_bound"] = max(stats["solver_bound"], proved)
            if flag is not None:
                stats[flag] = True
        if not short():
            name = "OPTIMAL"

    if decide > 0 and short():
        settle(_decide(problem, mode, m, best, bound, float(decide), int(max_decisions), clock,
                     int(seed), stats["decisions"]))
    if split > 0 and short():
        stats["split"] = []
        settle(_split(problem, mode, m, best, float(split), int(workers), clock, int(seed),
                    stats["split"], progress), "split_proved")
    best_T, best_plan, best_ops, from_solver = (best["T"], best["plan"], best["ops"],
                                                best["from_solver"])
    return Certificate(problem.name, mode, order, best_T, bound, name, best_plan,
                       [[str(o) for o in row] for row in best_ops], from_solver,
                       time.perf_counter() - t_start, unit, stats)


def _deadline(t_start: float, time_limit: float, clock: Any) -> float:
    """When a two-stage program must stop: ``time_limit`` after the start, or the clock's."""
    deadline = t_start + time_limit
    if clock is not None and math.isfinite(clock.remaining()):
        deadline = min(deadline, time.perf_counter() + clock.remaining())
    return deadline


def _two_stage(problem: Problem, best_plan: Plan, best_ops: list[list[Op]], best_T: float,
               t_start: float, time_limit: float, clock: Any,
               mode: str = "stash") -> Certificate | None:
    """An exact program of :mod:`.two_stage` (stash, or recompute where
    :func:`.two_stage.recompute_program_applies`) in place of the solver (None when it does
    not finish within the time limit or the clock, or runs out of room)."""
    from ..bound import lower_bound

    upper = best_T * (1.0 + DP_SLACK)
    program = two_stage_stash if mode == "stash" else two_stage_recompute
    r = program(problem, upper, _deadline(t_start, time_limit, clock))
    if not r.finished:
        return None
    from_solver = False
    if r.plan is not None:
        ops = dominant_order(build_schedule("gpipe", r.plan))
        T = simulate_order(problem, r.plan, ops)
        if T < best_T:
            best_plan, best_ops, best_T, from_solver = r.plan, ops, T, True
    # no plan below ``upper`` but what it found: the least T, up to float rounding
    bound = max(lower_bound(problem, mode), min(r.T, upper) * (1.0 - DP_SLACK))
    return _program_certificate(problem, mode, best_plan, best_ops, best_T, bound,
                                from_solver, t_start, {"method": "two-stage dp", **r.stats})


def _program_certificate(problem: Problem, mode: str, plan: Plan, ops: list[list[Op]],
                         value: float, bound: float, from_solver: bool, t_start: float,
                         stats: dict[str, Any]) -> Certificate:
    """The certificate of a two-stage program that ends the solve (no solver ran)."""
    status = "OPTIMAL" if value - bound <= OPT_TOL * value else "FEASIBLE"
    return Certificate(problem.name, mode, "any", value, bound, status, plan,
                       [[str(o) for o in row] for row in ops], from_solver,
                       time.perf_counter() - t_start, unit_for(value, RESOLUTION),
                       {**stats, "conflicts": 0, "branches": 0, "solver_bound": bound,
                        "decisions": []})


def _stage_ranges(m: Any, s: int, mode: str, fwd: Any, bwd: Any) -> list[tuple[Any, set]]:
    """Stage ``s``'s range booleans of the model ``m`` with the ranges ``[a, b)`` that the
    forward sizes ``fwd`` (and, but in stash mode, where they are the same booleans, the
    backward sizes ``bwd``) choose."""
    out = []
    for lits, sizes in [(m.x[s], fwd)] + ([(m.y[s], bwd)] if mode != "stash" else []):
        chosen, a = set(), 0
        for q in sizes:
            chosen.add((a, a + q))
            a += q
        out.append((lits, chosen))
    return out


def _split(problem: Problem, mode: str, m: Any, best: dict[str, Any], limit: float,
           workers: int, clock: Any, seed: int, log: list[dict[str, Any]],
           progress: Callable[[str], None] | None = None) -> float:
    """The last-stage split (docs/CERTIFY.md "The last-stage split"): with ``K`` the integer
    time just below what ``OPT_TOL`` needs for ``best["T"]`` to be optimal, every last-stage
    partition pair the stage relaxation leaves at or below ``(K + 1) * unit``
    (:func:`.split.last_stage_candidates`; where it leaves too many, the pairs along which the
    end-stages program ends below it, :func:`.split.end_stage_candidates`) is ruled out by
    decision solves on the model ``m`` with integer ``T <= K``, one per backward partition of
    the pairs: that partition fixed and the forward one among the pairs' (a table), of at
    most ``limit`` seconds on ``workers`` threads.
    Returns ``(K + 1) * unit`` when every one is infeasible (no schedule is below it), else
    ``-inf``; a schedule found better than ``best`` (re-simulated) replaces it and the split
    starts again below it (at most :data:`DECISIONS` times). ``progress``: called with a line
    for the list and for each solve."""
    from ortools.sat.python import cp_model

    from .split import end_stage_candidates, last_stage_candidates

    unit, s = m.unit, problem.S - 1
    for _ in range(DECISIONS):
        K = math.ceil(best["T"] * (1.0 - OPT_TOL) / unit) - 1
        target = (K + 1) * unit
        cands, source = last_stage_candidates(problem, mode, target), "relaxation"
        if cands is None:
            cands = end_stage_candidates(problem, mode, target,
                                         expired=lambda: clock is not None and clock.expired())
            source = "end stages"
        log.append({"target": target, "from": source,
                    "candidates": None if cands is None else len(cands)})
        if cands is None:
            if progress is not None:
                progress(f"split below {target * 1e3:.6f} ms: too many last-stage pairs, "
                         "nothing proven")
            return -math.inf
        groups: dict[tuple[int, ...], list[tuple[int, ...]]] = {}
        for P, Q in cands:  # in stash mode the sizes are one set of booleans: a pair a group
            groups.setdefault(P if mode == "stash" else Q, []).append(P)
        if progress is not None:
            progress(f"split below {target * 1e3:.6f} ms: {len(cands)} last-stage pairs "
                     f"from the {source}, {len(groups)} solves (one per backward partition)")
        xs = sorted(m.x[s])  # the forward ranges, the table's columns
        x_lits = [m.x[s][r] for r in xs]
        for g, (Q, Ps) in enumerate(groups.items()):
            if clock is not None and clock.expired():
                return -math.inf
            cp = m.cp.clone()
            _, *backward = _stage_ranges(m, s, mode, Ps[0], Q)
            for lits, chosen in backward:  # the backward partition (none in stash mode)
                for r, lit in lits.items():
                    cp.add(cp.get_bool_var_from_proto_index(lit.index) == (r in chosen))
            rows = [[int(r in chosen) for r in xs]
                    for _, chosen in (_stage_ranges(m, s, mode, P, Q)[0] for P in Ps)]
            cp.add_allowed_assignments(
                [cp.get_bool_var_from_proto_index(lit.index) for lit in x_lits], rows)
            solver, status, wall = _decision(cp, m, K, limit, workers, seed, clock)
            log.append({"backward": list(Q), "forwards": [list(P) for P in Ps],
                        "status": solver.status_name(status), "wall": wall})
            if progress is not None:
                progress(f"split solve {g + 1} of {len(groups)}: backward {list(Q)}, "
                         f"{len(Ps)} forward partitions: {solver.status_name(status)} "
                         f"({wall:.1f} s)")
            if status == cp_model.INFEASIBLE:
                continue
            if status in (cp_model.OPTIMAL, cp_model.FEASIBLE) and \
                    _take(problem, mode, solver, m, best):
                break  # a faster schedule: the split again, below it
            return -math.inf  # unknown within the limit, or a schedule not below the best
        else:
            return target
    return -math.inf


def _decision(cp: Any, m: Any, K: int, limit: float, workers: int, seed: int, clock: Any
              ) -> tuple[Any, int, float]:
    """Solve ``cp`` (a clone of the model ``m``) with integer ``T <= K`` added, for at most
    ``limit`` seconds: the solver, its status and the seconds it took."""
    from ortools.sat.python import cp_model

    cp.add(cp.get_int_var_from_proto_index(m.T.index) <= K)
    solver = cp_model.CpSolver()
    solver.parameters.max_time_in_seconds = limit
    solver.parameters.num_workers = workers
    solver.parameters.random_seed = seed
    t0 = time.perf_counter()
    status = _run(solver, cp, clock)
    return solver, status, time.perf_counter() - t0


def _take(problem: Problem, mode: str, solver: Any, m: Any, best: dict[str, Any]) -> bool:
    """Re-simulate the solver's schedule; when it is faster than ``best``, it becomes
    ``best`` (True)."""
    plan, ops = _extract(problem, mode, solver, m)
    T = simulate_order(problem, plan, ops)
    if T < best["T"]:
        best.update(T=T, plan=plan, ops=ops, from_solver=True)
        return True
    return False


def _decide(problem: Problem, mode: str, m: Any, best: dict[str, Any], bound: float,
            limit: float, steps: int, clock: Any, seed: int,
            log: list[dict[str, Any]]) -> float:
    """Decision solves "is there a schedule with integer ``T <= K``?" on the model ``m``
    (docs/CERTIFY.md "Decisions"); returns the best bound they prove (``(K + 1) * unit`` for
    the largest ``K`` found infeasible, else ``-inf``). ``K`` starts just below what
    ``OPT_TOL`` needs for ``best["T"]`` to be optimal, then bisects towards ``bound``;
    a schedule found better than ``best`` (re-simulated) replaces it."""
    from ortools.sat.python import cp_model

    unit = m.unit
    proved = -math.inf
    lo = math.ceil(bound / unit)  # every K below lo proves no more than ``bound``
    hi = math.ceil(best["T"] * (1.0 - OPT_TOL) / unit) - 1  # infeasible here: optimal
    K = hi
    for _ in range(steps):
        if not lo <= K <= hi or (clock is not None and clock.expired()):
            break
        solver, status, wall = _decision(m.cp.clone(), m, K, limit, 1, seed, clock)
        log.append({"K": K, "target": K * unit, "status": solver.status_name(status),
                    "wall": wall})
        if status == cp_model.INFEASIBLE:  # every schedule has integer T >= K + 1
            proved = max(proved, (K + 1) * unit)
            lo = K + 1
        elif status in (cp_model.OPTIMAL, cp_model.FEASIBLE):
            # a schedule with T <= K: every schedule above K is above the solver's bound too
            proved = max(proved, float(solver.best_objective_bound) * unit)
            lo = max(lo, math.ceil(solver.best_objective_bound))
            _take(problem, mode, solver, m, best)
            hi = min(int(solver.objective_value) - 1,
                     math.ceil(best["T"] * (1.0 - OPT_TOL) / unit) - 1)
            K = hi  # below the new schedule, from the top again
            continue
        else:  # unknown within the limit: look lower
            hi = K - 1
        K = (lo + hi + 1) // 2
    return proved
