"""One ``execute`` run of chunk plans, importable: plan files -> spec and predictions ->
launch -> report rows, and the float64 gradient check (docs/EXECUTE.md, "Chunk plans").

The prediction of every plan is the device simulator's on the problem's layers grouped into
the plan's chunks (:func:`umpipe_bench.chunk_torch.simulate_plan`), the lists being the ones
the devices run (both come from :func:`umpipe_bench.chunk_schedule.chunk_order`). Pure: the
launch happens in ``torchrun`` processes; only :func:`gradient_check` imports torch.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from ..chunk_schedule import chunk_order
from ..chunk_torch import simulate_plan
from ..chunkplan import ChunkPlan
from ..errors import InputError
from ..problem import Problem
from .chunk_job import ChunkRunSpec, chunk_spec_for_problem
from .errors import StageFailure
from .execution import launch_in, plan_label

__all__ = ["ChunkExecution", "gradient_check", "load_chunk_plans", "prepare_chunks",
           "run_chunk_execution"]

#: the launcher's argument that starts :mod:`.chunk_worker` in every process
STAGE_ARGS = ("--chunks",)


@dataclass
class ChunkExecution:
    """A prepared run of chunk plans: the spec the devices get and what the device simulator
    predicts for each plan."""

    problem: Problem
    runs: list[tuple[str, ChunkPlan]]
    spec: ChunkRunSpec
    predicted: dict[str, float | None] = field(default_factory=dict)
    kinds: dict[str, str] = field(default_factory=dict)
    busy: dict[str, list[float]] = field(default_factory=dict)
    #: fallbacks the chunk rule took per plan (docs/CHUNK-SCHEDULES.md §2)
    fallbacks: dict[str, int] = field(default_factory=dict)

    def rows(self, result: dict[str, Any]) -> list[dict[str, Any]]:
        """Measured vs predicted rows of a device result (:func:`.report.summarize`)."""
        from .report import summarize

        return summarize(result, self.predicted, kinds=self.kinds, busy=self.busy)


def load_chunk_plans(paths: Sequence[str], devices: int, mode: str | None = None
                     ) -> list[tuple[str, ChunkPlan]]:
    """Read chunk plan files (labelled by their stems, made unique), each for ``devices``
    devices; ``mode`` replaces each file's memory mode. Errors name the file and field."""
    runs: list[tuple[str, ChunkPlan]] = []
    labels: set[str] = set()
    for path in paths:
        if not Path(path).is_file():
            raise InputError(f"chunk plan file {path!r} does not exist (with --devices every "
                             "plan is a chunk plan file, schema umpipe-chunk-plan/1)")
        plan = ChunkPlan.load(path)
        if plan.D != devices:
            raise InputError(f"--devices {devices}: chunk plan file {path!r} is for "
                             f"D = {plan.D} devices (its field 'D')")
        if mode is not None and mode != plan.mode:
            try:
                plan = plan.replace(mode=mode)
            except InputError as exc:
                raise InputError(f"--mode {mode}: chunk plan file {path!r}: {exc}") from None
        label = base = plan_label(path)
        n = 2
        while label in labels:
            label, n = f"{base}#{n}", n + 1
        labels.add(label)
        runs.append((label, plan))
    return runs


def prepare_chunks(problem: Problem, paths: Sequence[str], devices: int, *,
                   mode: str | None = None, **settings: Any) -> ChunkExecution:
    """Read and check the plans against the per-layer ``problem``, build the spec (which
    refuses what cannot run) and predict every plan."""
    runs = load_chunk_plans(paths, devices, mode)
    for label, plan in runs:
        try:
            plan.validate(problem)
        except InputError as exc:
            raise InputError(f"chunk plan {label!r}: {exc}") from None
    spec = chunk_spec_for_problem(problem, runs, **settings)
    ex = ChunkExecution(problem, runs, spec)
    for label, plan in runs:
        tl = simulate_plan(problem, plan)
        ex.predicted[label] = tl.iteration_time
        ex.busy[label] = list(tl.busy)
        ex.kinds[label] = plan.describe()
        ex.fallbacks[label] = len(chunk_order(plan).fallbacks)
    return ex


def run_chunk_execution(ex: ChunkExecution, run_dir: str | os.PathLike[str] | None = None, *,
                        deadline_s: float = 3600.0, echo: bool = False,
                        extra_env: dict[str, str] | None = None) -> dict[str, Any]:
    """Launch ``ex`` (one process per device) and return rank 0's result (a temporary run
    folder is removed unless the run failed). A failure is the launcher's
    :class:`~.errors.StageFailure`, its process named as the device it is (``.stage`` is
    the device's rank)."""
    try:
        return launch_in(ex.spec, run_dir, deadline_s=deadline_s, echo=echo,
                         extra_env=extra_env, stage_args=STAGE_ARGS)
    except StageFailure as exc:
        if exc.stage is not None:
            text = str(exc).replace(f"stage {exc.stage} failed", f"device {exc.stage} failed", 1)
            exc.args = (text, *exc.args[1:])
        raise


def gradient_check(spec: ChunkRunSpec, result: dict[str, Any], run_dir: str | os.PathLike[str],
                   *, rtol: float = 1e-10, atol: float = 1e-12) -> list[tuple[str, list[str]]]:
    """Per entry of a run made with ``dump_grads`` (float64): its label and what differs from
    the single-process full-batch reference (empty: nothing): every chunk's parameter
    gradients, the loss, and the messages each stream carried against the plan's count."""
    from .reference import compare_gradients, load_chunk_gradients, reference_gradients

    out = []
    by_label = {e["label"]: e for e in result["entries"]}
    for k, entry in enumerate(spec.entries):
        ref_loss, ref = reference_gradients(spec.model, spec.config, entry.layers, spec.B,
                                            dtype=spec.dtype, seed=spec.seed)
        loss, got = load_chunk_gradients(run_dir, k, entry.devices)
        bad = compare_gradients(ref, got, rtol=rtol, atol=atol, unit="chunk")
        if loss is None or abs(loss - ref_loss) > rtol * abs(ref_loss) + atol:
            bad.append(f"loss {loss} differs from the reference loss {ref_loss}")
        for m in by_label[entry.label].get("messages", []):
            if not m["sent"] == m["received"] == m["expected"]:
                bad.append(f"{m['kind']} stream of chunk boundary {m['boundary']} (device "
                           f"{m['src']} -> {m['dst']}): {m['sent']} sent, {m['received']} "
                           f"received, the plan has {m['expected']}")
        out.append((entry.label, bad))
    return out
