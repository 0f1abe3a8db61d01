"""Entries files for a measured run of torch.distributed.pipelining's schedules
(docs/TORCH-SCHEDULES.md §7), and the predictions a measured run is compared with.

An entries file names a workload (:func:`resolve_workload`: a name in
:data:`.torch_schedules.WORKLOADS`, a profiled problem, or a dict) and its entries (schedule,
torch class, M, partition, v, optionally ``T_pred``):

* :func:`predicted_entries`: every torch schedule at its best (v, M, partition) by the device
  simulator, with its predicted T;
* :func:`calibration_entries`: GPipe at every M dividing B, to fit the per-action overhead
  (:func:`fit_overhead`, from the device simulator's T of measured rows, :func:`predict_rows`);
* :func:`chunk_entries`: the entries ``{"chunk_plan": FILE}`` of a file, chunk plans that the
  same launch runs through the runtime's own executor, with the device simulator's T;
* :func:`example_entries`: every schedule at a few M on even partitions;
* :func:`profile_command`: the ``umpipe-bench profile`` command of a named workload's
  one-layer-per-stage problem.

``scripts/measure_torch_schedules.py`` prints these and runs the entries on ``D = 2`` ranks.
Imports no torch (the simulator's torch orders import it when called).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import UmpipeError
from ..layout import balanced_counts
from ..registry import get_problem
from ..torch_schedules import TORCH_SCHEDULES
from .errors import PlanRefused
from .torch_schedules import WORKLOADS

__all__ = ["D", "calibration_entries", "chunk_entries", "example_entries", "fit_overhead",
           "predict_rows", "predicted_entries", "profile_command", "resolve_workload"]

#: ranks of a measured run
D = 2


def resolve_workload(w: Any) -> dict[str, Any]:
    """A workload name or dict -> ``{"name", "model", "config", "B", "layers" (or None)}``."""
    if isinstance(w, str):
        if w in WORKLOADS:
            return {"name": w, **WORKLOADS[w]}
        try:  # a profiled problem (name or file): its provenance names model, config, B
            problem = get_problem(w)
        except UmpipeError:
            raise PlanRefused(f"unknown workload {w!r}; known: {', '.join(WORKLOADS)}, a "
                              "profiled problem (name or .json file), or a dict with model, "
                              "config, B") from None
        prov = problem.provenance
        if "model" not in prov:
            raise PlanRefused(f"problem {problem.name!r} has no 'model' in its provenance, "
                              "so its model cannot be rebuilt")
        return {"name": problem.name, "model": str(prov["model"]),
                "config": dict(prov.get("config") or {}), "B": problem.B, "layers": None}
    if not isinstance(w, dict) or "model" not in w or "B" not in w:
        raise PlanRefused("field 'workload' must be a workload name or a dict with 'model' and "
                          f"'B', got {w!r}")
    return {"name": str(w.get("name", f"{w['model']}-b{w['B']}")), "model": str(w["model"]),
            "config": dict(w.get("config") or {}), "B": int(w["B"]),
            "layers": int(w["layers"]) if w.get("layers") is not None else None}


def _message_cpu(problem: Any, message_cpu: tuple[float, float] | None) -> tuple[float, float]:
    """``message_cpu`` as given, else the charge a runtime-calibrated problem carries (off for
    any other problem; :func:`.calibration.runtime_model`)."""
    from .calibration import runtime_model

    return runtime_model(problem) if message_cpu is None else message_cpu


def predicted_entries(problem_name: str, mode: str, op_overhead: float = 0.0,
                      message_cpu: tuple[float, float] | None = None) -> dict[str, Any]:
    """An entries file from the predictor: every torch schedule at its best (v, M, partition)
    on the one-layer-per-stage ``problem_name`` for ``D`` devices (``umpipe-bench schedules``),
    with its predicted T. ``message_cpu``: the CPU charge of a message on both ends
    (:func:`umpipe_bench.devsim.simulate_devices`); None: the problem's own (a runtime-calibrated
    problem's, off otherwise)."""
    from umpipe_bench.torch_schedules.best import schedule_table

    problem = get_problem(problem_name)
    msg = _message_cpu(problem, message_cpu)
    entries = []
    for r in schedule_table(problem, D, mode, op_overhead=op_overhead, message_cpu=msg):
        if r.choice is None:
            print(f"predict: {r.schedule} left out: {r.reason}", file=sys.stderr)
            continue
        c = r.choice
        entries.append({"schedule": r.schedule, "torch_class": r.torch_class, "M": c.M,
                        "partition": list(c.counts), "v": c.v, "T_pred": c.T})
    out: dict[str, Any] = {"workload": problem_name, "entries": entries,
                           "op_overhead": op_overhead}
    if msg != (0.0, 0.0):
        out["message_cpu"] = list(msg)
    return out


def chunk_entries(workload: Any, items: list[dict[str, Any]]) -> list[Any]:
    """The chunk plans of an entries file's ``{"chunk_plan": FILE[, "label"]}`` items as
    :class:`.chunk_job.ChunkEntry` objects, each checked against the workload's per-layer
    problem (which must be a profiled problem: its stages are the layers the plan's chunks
    group) and carrying the device simulator's T (``T_pred``)."""
    from ..chunk_torch import simulate_plan
    from .chunk_execution import load_chunk_plans
    from .chunk_job import chunk_spec_for_problem

    if not items:
        return []
    if not isinstance(workload, str):
        raise PlanRefused("an entry with field 'chunk_plan' needs field 'workload' to name a "
                          f"profiled problem (its layers), got {workload!r}")
    problem = get_problem(workload)
    out = []
    for i, item in enumerate(items):
        path = item["chunk_plan"]
        if not isinstance(path, str):
            raise PlanRefused(f"chunk entry {i}: field 'chunk_plan' must be a chunk plan file "
                              f"name, got {path!r}")
        try:
            ((stem, plan),) = load_chunk_plans([path], D)
            plan.validate(problem)
        except UmpipeError as exc:
            raise PlanRefused(f"chunk entry {i}: {exc}") from None
        label = str(item.get("label") or f"chunk:{stem}")
        (entry,) = chunk_spec_for_problem(problem, [(label, plan)]).entries
        entry.T_pred = simulate_plan(problem, plan).iteration_time
        out.append(entry)
    return out


def calibration_entries(problem_name: str) -> dict[str, Any]:
    """Entries that calibrate the runtime's per-action overhead and touch none of the schedules
    a prediction picks: GPipe on a balanced partition at every M dividing B (2M actions per
    device, from 2 to 2B)."""
    problem = get_problem(problem_name)
    part = list(balanced_counts(problem.S, D))
    entries = [{"schedule": "gpipe", "torch_class": "ScheduleGPipe", "M": M, "partition": part,
                "v": 1, "label": f"calibrate-gpipe:M{M}"}
               for M in range(1, problem.B + 1) if problem.B % M == 0]
    return {"workload": problem_name, "entries": entries}


def predict_rows(problem_name: str, rows: list[dict[str, Any]], op_overhead: float,
                 message_cpu: tuple[float, float] | None = None) -> list[float]:
    """The device simulator's T of every measured entry (``rows`` of a run's summary);
    ``message_cpu`` as in :func:`predicted_entries`."""
    from umpipe_bench.torch_schedules import schedule_info, torch_orders, torch_send_after
    from umpipe_bench.torch_schedules.best import simulate_chunks

    problem = get_problem(problem_name)
    msg = _message_cpu(problem, message_cpu)
    out = []
    for r in rows:
        info = schedule_info(r["torch_class"])
        v = r["v"]
        vv = None if info.layout == "one" else v
        lists = torch_orders(info.name, D, r["M"], vv)
        out.append(simulate_chunks(problem, r["partition"], info.layout, D, v, r["M"], "stash",
                                   lists, op_overhead, msg,
                                   send_after=torch_send_after(info.name, D, r["M"], vv)
                                   ).iteration_time)
    return out


def fit_overhead(problem_name: str, run_json: str) -> float:
    """The per-action overhead (seconds) that makes the device simulator best match a measured
    run (least squares on log times, golden-section search over 0..50 ms)."""
    rows = json.loads(Path(run_json).read_text(encoding="utf-8"))["summary"]["rows"]
    meas = np.array([r["median"] for r in rows])

    def loss(c: float) -> float:
        return float(np.sum(np.log(np.array(predict_rows(problem_name, rows, c)) / meas) ** 2))

    lo, hi = 0.0, 0.05
    g = (5 ** 0.5 - 1) / 2
    a, b = hi - g * (hi - lo), lo + g * (hi - lo)
    fa, fb = loss(a), loss(b)
    for _ in range(40):
        if fa < fb:
            hi, b, fb = b, a, fa
            a = hi - g * (hi - lo)
            fa = loss(a)
        else:
            lo, a, fa = a, b, fb
            b = lo + g * (hi - lo)
            fb = loss(b)
    return (lo + hi) / 2


def example_entries(name: str) -> dict[str, Any]:
    """An entries file for ``name``: every torch schedule at a few M, even partitions."""
    w = resolve_workload(name)
    entries = []
    for info in TORCH_SCHEDULES.values():
        C = D * info.default_v
        for M in (4, 8):
            if w["B"] % M == 0:
                entries.append({"schedule": info.name, "torch_class": info.torch_class, "M": M,
                                "partition": list(balanced_counts(w["layers"], C)),
                                "v": C // D})
    return {"workload": name, "entries": entries}


def profile_command(name: str) -> str:
    """The ``umpipe-bench profile`` command writing the one-layer-per-stage problem of a
    named workload (the per-layer tables a predictor needs; co-run, as the -mini-s2 files)."""
    w = WORKLOADS[name]
    sets = " ".join(f"--set {k}={json.dumps(v)}" for k, v in w["config"].items())
    return (f"umpipe-bench profile {w['model']} --batch {w['B']} {sets} --threads 1 "
            f"--repeats 9 --warmup 2 --co-run --split-backward "
            f"--out results/real/torch-schedules/{name}-l{w['layers']}.json")
