"""Chunk plans as a launch: one process per device, each running its chunks' action lists
(docs/EXECUTE.md, "Chunk plans"; docs/CHUNK-SCHEDULES.md).

A :class:`ChunkRunSpec` is plain data (JSON) that every device process reads: the model, the
batch, and per entry the chunk plan resolved into what a device needs and nothing it would
have to derive again (the model layers of every chunk, the device of every chunk, every
chunk's forward, backward and weight-gradient partitions, and each device's action list as
the chunk rule ordered it, :func:`umpipe_bench.chunk_schedule.chunk_order`).

Messages between devices travel on **streams**: one per chunk boundary and direction whose two
chunks sit on different devices (:func:`streams`). A stream carries the producer chunk's
microbatches of one kind in index order (activations: the forward partition ``P[c]`` of the
upstream chunk; gradients: the backward partition ``Q[c+1]`` of the downstream chunk), and the
consumer re-chunks them in the same order; each stream gets a communicator of its own
(:func:`stream_slots`), so the order in which a device interleaves its streams can never hold
one stream's message behind another's (docs/EXECUTE.md, "Message order").

Pure: no torch import; the launcher hands the spec to ``torchrun``.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..chunk_schedule import chunk_order
from ..chunkplan import ChunkPlan
from ..errors import InputError
from ..problem import Problem
from .errors import PlanRefused
from .grouping import normalize_layers_per_stage, stage_source
from .spec import RunSettings, check_run_names

__all__ = [
    "ChunkEntry",
    "ChunkRunSpec",
    "Stream",
    "check_chunk_entries",
    "chunk_entry",
    "chunk_spec_for_problem",
    "make_chunk_spec",
    "stream_slots",
    "streams",
]

#: the two kinds of stream: activations go down the chunks, gradients up
KINDS = ("act", "grad")


@dataclass
class ChunkEntry:
    """One chunk plan to time, resolved for the device processes (module docstring).

    ``lists[d]`` holds device ``d``'s actions in execution order, written as torch writes them
    (``"0F1"``, ``"3I2"``, ``"3W0"``, ``"1B0"``: chunk, kind, microbatch index within that
    chunk's partition of that kind). ``wgt`` equals ``bwd`` when the plan is not split.
    ``check_complete`` (tests only) turns off the executor's end-of-iteration check that every
    microbatch ran every pass, so that a deliberately incomplete list reaches the gradient
    comparison.
    """

    label: str
    mode: str
    split: bool
    devices: list[int]
    layers: list[list[int]]
    fwd: list[list[int]]
    bwd: list[list[int]]
    wgt: list[list[int]]
    lists: list[list[str]]
    plan: dict[str, Any] = field(default_factory=dict)
    check_complete: bool = True
    #: the device simulator's T, where a launch reports it beside the measured times
    T_pred: float | None = None

    @property
    def C(self) -> int:
        return len(self.devices)

    @property
    def D(self) -> int:
        return len(self.lists)


@dataclass(frozen=True)
class Stream:
    """Messages of one chunk boundary and direction between two devices: ``kind`` ``"act"``
    runs from chunk ``boundary`` (on ``src``) to ``boundary + 1`` (on ``dst``), ``"grad"`` the
    other way; ``messages`` per iteration (the producer's microbatches of that kind)."""

    boundary: int
    kind: str
    src: int
    dst: int
    messages: int


def streams(entry: ChunkEntry) -> list[Stream]:
    """The entry's streams between devices, in boundary order, activations before gradients
    (chunks consecutive on one device pass tensors locally and have none)."""
    out = []
    for c in range(entry.C - 1):
        up, down = entry.devices[c], entry.devices[c + 1]
        if up == down:
            continue
        out.append(Stream(c, "act", up, down, len(entry.fwd[c])))
        out.append(Stream(c, "grad", down, up, len(entry.bwd[c + 1])))
    return out


def stream_slots(entries: Sequence[ChunkEntry]
                 ) -> tuple[list[tuple[int, int]], list[dict[tuple[int, str], int]]]:
    """Communicators for the streams: ``(pairs, slots)``.

    ``pairs`` lists one ``(src, dst)`` per communicator to create, in the order every process
    creates them; ``slots[k][(boundary, kind)]`` is the index into ``pairs`` of entry ``k``'s
    stream. Entries run one at a time, so they share communicators: the ``n``-th stream of an
    entry on a directed device pair takes that pair's ``n``-th communicator.
    """
    pairs: list[tuple[int, int]] = []
    index: dict[tuple[int, int, int], int] = {}
    slots: list[dict[tuple[int, str], int]] = []
    for entry in entries:
        used: dict[tuple[int, int], int] = {}
        mine: dict[tuple[int, str], int] = {}
        for s in streams(entry):
            n = used.get((s.src, s.dst), 0)
            used[(s.src, s.dst)] = n + 1
            key = (s.src, s.dst, n)
            if key not in index:
                index[key] = len(pairs)
                pairs.append((s.src, s.dst))
            mine[(s.boundary, s.kind)] = index[key]
        slots.append(mine)
    return pairs, slots


def _chunk_layers(plan: ChunkPlan, stage_groups: Sequence[Sequence[int]]) -> list[list[int]]:
    """The model layers of every chunk: a chunk of ``n`` problem stages takes their layers."""
    if sum(plan.layers) != len(stage_groups):
        raise PlanRefused(f"chunk plan field 'layers' {list(plan.layers)} covers "
                          f"{sum(plan.layers)} stages; the problem has {len(stage_groups)}")
    out, s = [], 0
    for n in plan.layers:
        out.append([i for g in stage_groups[s:s + n] for i in g])
        s += n
    return out


def chunk_entry(label: str, plan: ChunkPlan, stage_groups: Sequence[Sequence[int]]
                ) -> ChunkEntry:
    """The entry of ``plan`` whose chunks take the model layers of ``stage_groups`` (each a
    problem stage's layer indices, :func:`.grouping.normalize_layers_per_stage`)."""
    layers = _chunk_layers(plan, stage_groups)
    wgt = plan.wgt if plan.split and plan.wgt is not None else plan.bwd
    return ChunkEntry(
        label=label, mode=plan.mode, split=plan.split, devices=list(plan.devices),
        layers=layers, fwd=[list(p) for p in plan.fwd], bwd=[list(q) for q in plan.bwd],
        wgt=[list(r) for r in wgt], lists=chunk_order(plan).names(), plan=plan.to_dict())


def check_chunk_entries(entries: Sequence[ChunkEntry], D: int, B: int) -> None:
    """Refuse an entry a launch of ``D`` processes on a batch of ``B`` cannot run."""
    for e in entries:
        if e.D != D:
            raise PlanRefused(f"chunk plan {e.label!r} is for D = {e.D} devices; the run "
                              f"has D = {D}")
        if any(sum(p) != B for p in (*e.fwd, *e.bwd, *e.wgt)):
            raise PlanRefused(f"chunk plan {e.label!r}: partitions must sum to B = {B}")


@dataclass
class ChunkRunSpec(RunSettings):
    """Everything the device processes of one launch need (JSON); ``D`` processes."""

    ENTRY: ClassVar[type] = ChunkEntry

    run_id: str
    model: str
    config: dict[str, Any]
    B: int
    D: int
    entries: list[ChunkEntry]

    def __post_init__(self) -> None:
        """Refuse what no device process could run (before launching)."""
        check_run_names(self)
        labels = [e.label for e in self.entries]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise PlanRefused(f"two plans share the label {dup[0]!r}")
        check_chunk_entries(self.entries, self.D, self.B)

    @property
    def S(self) -> int:
        """Processes to launch (the launcher's name for it): one per device."""
        return self.D


def make_chunk_spec(model: str, config: Mapping[str, Any], layers_per_stage: Sequence[Any],
                    B: int, runs: Sequence[tuple[str, ChunkPlan]], *, problem_name: str = "",
                    **settings: Any) -> ChunkRunSpec:
    """A spec for ``runs`` (label, plan) whose chunks group the stages ``layers_per_stage``
    of ``model`` (settings: :class:`ChunkRunSpec` fields such as ``iters``, ``dtype``)."""
    if not runs:
        raise PlanRefused("no chunk plan to run")
    groups = normalize_layers_per_stage(layers_per_stage)
    D = runs[0][1].D
    entries = []
    for label, plan in runs:
        if plan.B != B:
            raise PlanRefused(f"chunk plan {label!r} partitions B = {plan.B} samples; the "
                              f"problem has B = {B}")
        if plan.D != D:
            raise PlanRefused(f"chunk plan {label!r} is for D = {plan.D} devices, the first "
                              f"plan for D = {D}; one launch runs one device count")
        try:
            entries.append(chunk_entry(label, plan, groups))
        except InputError as exc:
            raise PlanRefused(f"chunk plan {label!r}: {exc}") from None
    return ChunkRunSpec(run_id=uuid.uuid4().hex, model=model, config=dict(config), B=B, D=D,
                        entries=entries, problem=problem_name, **settings)


def chunk_spec_for_problem(problem: Problem, runs: Sequence[tuple[str, ChunkPlan]],
                           **settings: Any) -> ChunkRunSpec:
    """A spec for ``runs`` on a profiled per-layer problem, rebuilt from its provenance (its
    stages are the units the plans' ``layers`` count)."""
    model, config, lps = stage_source(problem.provenance)
    groups = normalize_layers_per_stage(lps)
    if len(groups) != problem.S:
        raise PlanRefused(f"problem {problem.name!r}: provenance 'layers_per_stage' has "
                          f"{len(groups)} stages but the problem has S = {problem.S}")
    prov = problem.provenance
    settings.setdefault("optimizer", str(prov.get("optimizer", "sgd")))
    for key, cast in (("dtype", str), ("threads", int), ("seed", int)):
        if key in prov:
            settings.setdefault(key, cast(prov[key]))
    return make_chunk_spec(model, config, groups, problem.B, runs, problem_name=problem.name,
                           **settings)
