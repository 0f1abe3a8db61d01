"""Turn a problem and plans into a :class:`RunSpec`, refusing what cannot run.

docs/MODEL.md §2 (plans) and §5 (the runtime contract).

Everything that can be checked without launching is checked here: the problem can be rebuilt
(profiled, with a model and layer grouping), every plan has the problem's stage count and
``B``, its schedule can be built (``1f1b`` needs EDP), and the stage grouping matches ``S``.
The per-stage operation lists are built once, here, by the core's schedule builder; workers run
exactly those lists.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from ..plan import Plan, PlanError
from ..problem import Problem
from ..schedules import build_schedule
from .errors import PlanRefused
from .grouping import normalize_layers_per_stage, stage_source
from .spec import Entry, RunSpec

__all__ = ["PlannedRun", "make_entries", "make_spec", "spec_for_problem"]


@dataclass(frozen=True)
class PlannedRun:
    """A plan to execute under a named schedule, with the label it is reported under."""

    label: str
    plan: Plan
    schedule: str


def _check(run: PlannedRun, S: int, B: int, where: str) -> list[list[list[Any]]]:
    plan = run.plan
    if plan.S != S:
        raise PlanRefused(
            f"plan {run.label!r} has {plan.S} stages but {where} has S = {S}; refused before launch"
        )
    if plan.B != B:
        raise PlanRefused(
            f"plan {run.label!r} partitions B = {plan.B} samples but {where} has B = {B}; "
            "refused before launch"
        )
    try:
        ops = build_schedule(run.schedule, plan)
    except (PlanError, KeyError) as exc:
        raise PlanRefused(f"plan {run.label!r}: {exc}") from exc
    return [[[op.kind, op.index, op.start, op.stop] for op in row] for row in ops]


def make_entries(
    runs: Sequence[PlannedRun], S: int, B: int, *, peer: bool = True, where: str = "the problem"
) -> list[Entry]:
    """Our entries in order, then (``peer``) one torch.pipelining entry per distinct EDP plan.

    A peer entry exists for stash-mode EDP(M) plans under ``gpipe``/``1f1b`` with ``M``
    dividing ``B`` (torch reuses first-microbatch-sized buffers, pytorch#126600); its
    ``twins`` name our entries that run the same plan. This is the one place that rule lives.
    """
    entries: list[Entry] = []
    peers: list[Entry] = []
    seen_labels: set[str] = set()
    for run in runs:
        if run.label in seen_labels:
            raise PlanRefused(f"two plans share the label {run.label!r}")
        seen_labels.add(run.label)
        ops = _check(run, S, B, where)
        p = run.plan
        entries.append(
            Entry(
                label=run.label,
                engine="umpipe",
                schedule=run.schedule,
                mode=p.mode,
                fwd=[list(x) for x in p.fwd],
                bwd=[list(x) for x in p.bwd],
                ops=ops,
            )
        )
        M = len(p.fwd[0])
        if peer and p.is_edp() and p.mode == "stash" and B % M == 0 and S > 1:
            label = f"torch:{run.schedule}:{M}"
            twin = next((e for e in peers if e.label == label), None)
            if twin is None:
                twin = Entry(
                    label=label,
                    engine="torch",
                    schedule=run.schedule,
                    mode="stash",
                    fwd=[list(x) for x in p.fwd],
                    bwd=[list(x) for x in p.bwd],
                    M=M,
                )
                peers.append(twin)
            twin.twins.append(run.label)
    return entries + peers


def make_spec(
    model: str,
    config: Mapping[str, Any],
    layers_per_stage: Sequence[Any],
    B: int,
    runs: Sequence[PlannedRun],
    *,
    peer: bool = True,
    problem_name: str = "",
    **settings: Any,
) -> RunSpec:
    """A spec for ``runs`` on the stages ``layers_per_stage`` of ``model`` (settings: RunSpec
    fields such as ``iters``, ``warmup``, ``backend``, ``dtype``, ``timeout_s``)."""
    groups = normalize_layers_per_stage(layers_per_stage)
    where = f"problem {problem_name!r}" if problem_name else "the stage grouping"
    entries = make_entries(runs, len(groups), B, peer=peer, where=where)
    return RunSpec(
        run_id=uuid.uuid4().hex,
        model=model,
        config=dict(config),
        layers_per_stage=groups,
        B=B,
        entries=entries,
        problem=problem_name,
        **settings,
    )


def spec_for_problem(
    problem: Problem, runs: Sequence[PlannedRun], *, peer: bool = True, **settings: Any
) -> RunSpec:
    """A spec for ``runs`` on a profiled problem, rebuilt from its provenance."""
    model, config, lps = stage_source(problem.provenance)
    groups = normalize_layers_per_stage(lps)
    if len(groups) != problem.S:
        raise PlanRefused(
            f"problem {problem.name!r}: provenance 'layers_per_stage' has {len(groups)} stages "
            f"but the problem has S = {problem.S}"
        )
    settings.setdefault("optimizer", str(problem.provenance.get("optimizer", "sgd")))
    if "dtype" in problem.provenance:
        settings.setdefault("dtype", str(problem.provenance["dtype"]))
    if "threads" in problem.provenance:
        settings.setdefault("threads", int(problem.provenance["threads"]))
    if "seed" in problem.provenance:
        settings.setdefault("seed", int(problem.provenance["seed"]))
    return make_spec(
        model, config, groups, problem.B, runs, peer=peer, problem_name=problem.name, **settings
    )
