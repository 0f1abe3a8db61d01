"""The plans of a measured comparison: the planned plan against the best equal plans.

``scripts/measure_real.py`` and ``scripts/prediction_scatter.py`` execute these plans
(:mod:`.execution`) and compare measured with predicted times:

* :func:`best_edp`: the fastest EDP(M) plan under a schedule by the simulator (every M, both
  memory modes; or stash plans whose M divides B, what torch.distributed.pipelining runs);
* :func:`planned`: the best plan of the first registered planner named, over both memory modes
  (else a seeded local search over cut bits, docs/MODEL.md §2);
* :func:`equal_plans`, :func:`best_capped`: every equal plan the user could run instead, and the
  fastest in-flight-capped variant of a plan (docs/SCHEDULES.md);
* :func:`save_plan`: a plan file whose stem is the label ``execute`` reports;
* :func:`reprofile`: the problem profiled again as its file was made;
* :func:`intervals`: a bootstrap 95 % interval of each measured speedup (:mod:`.stats`).

Imports no torch.
"""

from __future__ import annotations

import json
import random
import subprocess
import sys
from pathlib import Path
from typing import Any

from ..plan import Plan
from ..planners.evaluation.reference import best_edp as reference_best_edp
from ..problem import Problem
from ..registry import get_planner, planner_names
from ..simulator import simulate
from .stats import bootstrap_median, paired_ratios

__all__ = ["best_capped", "best_edp", "equal_plans", "intervals", "local_search", "planned",
           "predict", "reprofile", "save_plan"]

#: the checkout a re-profile runs in (its ``umpipe_bench`` is the one imported)
ROOT = Path(__file__).resolve().parents[2]


def predict(problem: Problem, plan: Plan, schedule: str) -> float:
    """The simulator's iteration time of ``plan`` under ``schedule`` (docs/MODEL.md §4)."""
    return simulate(problem, plan, schedule).iteration_time


def best_edp(problem: Problem, schedule: str, divides: bool = False) -> tuple[Plan, float]:
    """The fastest EDP(M) plan under ``schedule`` over every M and both memory modes;
    ``divides``: stash mode and only M dividing B (what torch.distributed.pipelining runs)."""
    if not divides:
        options = [(mode, *reference_best_edp(problem, mode, schedule))
                   for mode in ("stash", "recompute")]
        mode, M, t = min(options, key=lambda o: o[2])
        return Plan.edp(problem.S, problem.B, M, mode), t
    plans = [Plan.edp(problem.S, problem.B, M, "stash")
             for M in range(1, problem.B + 1) if problem.B % M == 0]
    return min(((p, predict(problem, p, schedule)) for p in plans), key=lambda pt: pt[1])


def local_search(problem: Problem, start: Plan, *, evals: int, seed: int) -> tuple[Plan, float]:
    """Seeded first-improvement search over cut bits (docs/MODEL.md §2) under ``gpipe``."""
    rng = random.Random(seed)
    fbits, bbits = start.to_bits()
    best_t = predict(problem, start, "gpipe")
    best = start
    if problem.B < 2:
        return best, best_t
    for _ in range(evals):
        f = [list(b) for b in fbits]
        g = [list(b) for b in bbits]
        for _ in range(rng.choice((1, 1, 2, 3))):
            s = rng.randrange(problem.S)
            i = rng.randrange(problem.B - 1)
            target = f if (start.mode == "stash" or rng.random() < 0.5) else g
            target[s][i] ^= 1
        plan = Plan.from_bits(f, None if start.mode == "stash" else g, start.mode)
        t = predict(problem, plan, "gpipe")
        if t <= best_t:
            best, best_t, fbits, bbits = plan, t, f, g
    return best, best_t


def planned(problem: Problem, names: list[str], budget: str, seed: int) -> tuple[Plan, float, str]:
    """Best plan of the first available planner over both modes, else local search."""
    available = set(planner_names())
    for name in names:
        if name.lower() not in available:
            continue
        best: tuple[Plan, float, str] | None = None
        for mode in ("stash", "recompute"):
            res = get_planner(name).plan(problem, mode=mode, budget=budget, seed=seed)
            if res.schedule != "gpipe" and res.schedule != res.plan.meta.get("schedule"):
                res.plan.meta["schedule"] = res.schedule
            if best is None or res.iteration_time < best[1]:
                best = (res.plan, res.iteration_time, f"{name} ({res.evaluations} evals)")
        assert best is not None
        return best
    start_s, _ = best_edp(problem, "gpipe")
    cands = []
    for mode in ("stash", "recompute"):
        start = Plan(fwd=start_s.fwd, bwd=start_s.bwd, mode=mode)
        plan, t = local_search(problem, start, evals=3000, seed=seed)
        cands.append((plan, t))
    plan, t = min(cands, key=lambda c: c[1])
    return plan, t, f"local search (no planner among {names} registered; 2 x 3000 evals)"


def equal_plans(problem: Problem, counts: list[int], best: dict[str, Plan],
                have: set[str]) -> list[tuple[str, Plan, str]]:
    """``(label, EDP(M) plan, schedule)`` for every ``M`` in ``counts`` under each schedule of
    ``best`` (in the memory mode of that schedule's best EDP plan), skipping labels already in
    ``have`` (the best EDP plans themselves run under their own labels)."""
    out: list[tuple[str, Plan, str]] = []
    seen = set(have)
    for m in counts:
        if not 1 <= m <= problem.B:
            raise SystemExit(f"[{problem.name}] --equal: M = {m} is not in 1..B = {problem.B}")
        for sched, base in best.items():
            e = Plan.edp(problem.S, problem.B, m, base.mode)
            kind = f"{sched}-edp{m}-{e.mode}"
            if kind in seen or f"equal-{kind}" in seen:
                continue
            seen.add(f"equal-{kind}")
            out.append((f"equal-{kind}", e, sched))
    return out


def best_capped(problem: Problem, plans: list[Plan]) -> tuple[Plan, float]:
    """The fastest in-flight-capped variant (docs/SCHEDULES.md) of ``plans``: every cap vector
    ``K`` in ``1..B`` per stage for S <= 2 (else each stage's cap alike), simulated."""
    import itertools

    best: tuple[Plan, float] | None = None
    for plan in plans:
        grid = (itertools.product(range(1, problem.B + 1), repeat=problem.S) if problem.S <= 2
                else ((k,) * problem.S for k in range(1, problem.B + 1)))
        for caps in grid:
            c = plan.with_caps(caps)
            t = predict(problem, c, "capped")
            if best is None or t < best[1]:
                best = (c, t)
    assert best is not None
    return best


def intervals(result: dict[str, Any], pairs: list[tuple[str, str]]) -> dict[str, Any]:
    """Bootstrap 95 % interval of the median per-round speedup ``base/other`` per pair."""
    ent = {e["label"]: e for e in result["entries"]}
    out: dict[str, Any] = {}
    for base, other in pairs:
        if base in ent and other in ent:
            iv = bootstrap_median(paired_ratios(ent[base]["times"], ent[other]["times"]))
            out[f"{other} vs {base}"] = {"median": iv.median, "low": iv.low, "high": iv.high,
                                         "level": iv.level, "rounds": iv.n}
    return out


def save_plan(plan: Plan, path: Path, schedule: str) -> Path:
    """Plan file whose stem is the label ``execute`` reports it under."""
    meta = dict(plan.meta)
    meta["schedule"] = schedule
    Plan(fwd=plan.fwd, bwd=plan.bwd, mode=plan.mode, meta=meta, caps=plan.caps).save(path)
    return path


def reprofile(problem: Problem, path: Path) -> Path:
    """Profile ``problem`` again, as its committed file was made (same model, config, B,
    grouping, rounds, co-runner), so that predictions and measurements are minutes apart: the
    machine's speed drifts more than the model's error between a profile and a later run."""
    prov = problem.provenance
    cfg = prov["config"]
    cmd = [
        sys.executable, "-c", "import sys; from umpipe_bench.cli import main; sys.exit(main())",
        "profile", str(prov["model"]), "--batch", str(problem.B),
        "--layers-per-stage", ",".join(str(k) for k in prov["layers_per_stage"]),
        "--repeats", str(prov.get("repeats", 5)), "--warmup", str(prov.get("warmup_rounds", 1)),
        "--threads", str(prov.get("threads", 1)), "--no-progress",
        *[a for k, v in cfg.items() for a in ("--set", f"{k}={json.dumps(v)}")],
        *(["--co-run"] if prov.get("co_runner") else []),
        *(["--optimizer", str(prov["optimizer"])] if prov.get("optimizer") else []),
        *(["--dtype", str(prov["dtype"])] if prov.get("dtype") else []),
        "--name", problem.name, "--out", str(path),
    ]
    print(f"[{problem.name}] re-profiling: {' '.join(cmd[3:])}", flush=True)
    proc = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if proc.returncode != 0:
        raise SystemExit(f"[{problem.name}] profile failed ({proc.returncode}):\n{proc.stderr}")
    return path

