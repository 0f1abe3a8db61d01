"""torch.distributed.pipelining's schedules as jobs: which chunks each rank holds, what torch
accepts, and the plain-data spec a launch hands to its processes (docs/MODEL.md §5).

A torch schedule runs ``C = D * v`` chunks (contiguous groups of the model's layers) on ``D``
ranks, each chunk a ``PipelineStage``. The chunk-to-rank layout is fixed by the schedule class:

* ``single``: ``ScheduleGPipe``, ``Schedule1F1B``: one chunk per rank (``C = D``);
* ``loop``: ``ScheduleInterleaved1F1B``, ``ScheduleLoopedBFS``, ``ScheduleInterleavedZeroBubble``:
  rank ``r`` holds chunks ``r, r + D, r + 2D, ...`` (``v`` per rank);
* ``v``: ``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``: rank ``r`` holds chunks ``r`` and
  ``2D - 1 - r`` (``v = 2``).

Every microbatch has ``B / M`` samples: torch cuts the batch with ``tensor_split`` and sizes
its receive buffers by the first microbatch, so ``M`` must divide ``B`` (pytorch#126600). The
other conditions checked here are the ones torch's constructors raise on (torch 2.13), so a
plan torch would refuse is refused before any process starts. Pure: no torch import.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from .errors import PlanRefused
from .spec import BACKENDS, DTYPE_NAMES, OPTIMIZERS

__all__ = [
    "ALIASES",
    "SCHEDULES",
    "WORKLOADS",
    "ScheduleKind",
    "TorchEntry",
    "TorchMultiSpec",
    "chunk_layers",
    "chunk_ranks",
    "make_entry",
    "rank_chunks",
]


@dataclass(frozen=True)
class ScheduleKind:
    """A torch schedule class: its chunk layout and whether it splits backward into I and W."""

    torch_class: str
    layout: str  # "single" | "loop" | "v"
    split_backward: bool


SCHEDULES: dict[str, ScheduleKind] = {
    k.torch_class: k
    for k in (
        ScheduleKind("ScheduleGPipe", "single", False),
        ScheduleKind("Schedule1F1B", "single", False),
        ScheduleKind("ScheduleInterleaved1F1B", "loop", False),
        ScheduleKind("ScheduleLoopedBFS", "loop", False),
        ScheduleKind("ScheduleInterleavedZeroBubble", "loop", True),
        ScheduleKind("ScheduleZBVZeroBubble", "v", True),
        ScheduleKind("ScheduleDualPipeV", "v", True),
    )
}

#: short names accepted where no ``torch_class`` is given
ALIASES: dict[str, str] = {
    "gpipe": "ScheduleGPipe",
    "1f1b": "Schedule1F1B",
    "interleaved-1f1b": "ScheduleInterleaved1F1B",
    "interleaved1f1b": "ScheduleInterleaved1F1B",
    "looped-bfs": "ScheduleLoopedBFS",
    "loopedbfs": "ScheduleLoopedBFS",
    "interleaved-zb": "ScheduleInterleavedZeroBubble",
    "interleaved-zero-bubble": "ScheduleInterleavedZeroBubble",
    "zbv": "ScheduleZBVZeroBubble",
    "zb-v": "ScheduleZBVZeroBubble",
    "dualpipev": "ScheduleDualPipeV",
    "dualpipe-v": "ScheduleDualPipeV",
}


#: Workloads for measuring torch's schedules on 2 CPU processes, one thread each: 14 and 16
#: layers (enough for 4 chunks of a few layers); B = 16 keeps one iteration near 100-250 ms on
#: D = 2 ranks (the -mini-s2 problems' B = 32 doubles it) and allows M in 1, 2, 4, 8, 16.
#: ``layers`` is the model's layer count (checked again by the ranks against the built model).
WORKLOADS: dict[str, dict[str, Any]] = {
    "gpt1-mini-b16": {
        "model": "gpt1-mini",
        "config": {"seq": 16, "vocab": 4096, "d_model": 256, "heads": 4, "mlp": 1024,
                   "blocks": 12},
        "B": 16,
        "layers": 14,
    },
    "vgg16-mini-b16": {
        "model": "vgg16-mini",
        "config": {"image": 32, "width": 40, "fc": 512, "classes": 10},
        "B": 16,
        "layers": 16,
    },
}


def chunk_ranks(layout: str, D: int, v: int) -> list[int]:
    """``rank[c]``: the rank that holds chunk ``c`` (``C = D * v`` chunks)."""
    if layout == "single":
        return list(range(D))
    if layout == "loop":
        return [c % D for c in range(D * v)]
    if layout == "v":
        return list(range(D)) + list(reversed(range(D)))
    raise ValueError(f"unknown layout {layout!r}")


def rank_chunks(layout: str, D: int, v: int, rank: int) -> list[int]:
    """The chunks rank ``rank`` holds, in increasing order (the order torch's stage list takes)."""
    return [c for c, r in enumerate(chunk_ranks(layout, D, v)) if r == rank]


def chunk_layers(partition: Sequence[int]) -> list[list[int]]:
    """Layer indices of each chunk: ``[2, 3]`` -> ``[[0, 1], [2, 3, 4]]``."""
    out, a = [], 0
    for n in partition:
        out.append(list(range(a, a + n)))
        a += n
    return out


@dataclass
class TorchEntry:
    """One torch schedule to time: class, ``M`` equal microbatches, layer counts per chunk."""

    label: str
    torch_class: str
    M: int
    partition: list[int]
    v: int
    T_pred: float | None = None
    extra: dict[str, Any] = field(default_factory=dict)

    @property
    def kind(self) -> ScheduleKind:
        return SCHEDULES[self.torch_class]


def make_entry(
    item: dict[str, Any], *, D: int, B: int, n_layers: int, index: int = 0
) -> TorchEntry:
    """Check one entry of a predictor's JSON (``schedule``, ``torch_class``, ``M``,
    ``partition``, optional ``v`` and ``T_pred``) against torch's rules; errors name the entry
    and the field."""
    where = f"entry {index} ({item.get('schedule', item.get('torch_class', '?'))!r})"
    cls = item.get("torch_class")
    if cls is None:
        name = str(item.get("schedule", "")).lower()
        if name not in ALIASES:
            raise PlanRefused(f"{where}: no 'torch_class' and 'schedule' is not one of "
                              f"{', '.join(sorted(ALIASES))}")
        cls = ALIASES[name]
    if cls not in SCHEDULES:
        raise PlanRefused(f"{where}: field 'torch_class' must be one of "
                          f"{', '.join(SCHEDULES)}, got {cls!r}")
    kind = SCHEDULES[cls]
    M = item.get("M")
    if isinstance(M, bool) or not isinstance(M, int) or M < 1:
        raise PlanRefused(f"{where}: field 'M' must be a positive int, got {M!r}")
    if B % M:
        raise PlanRefused(f"{where}: M = {M} does not divide B = {B}; torch cuts equal "
                          "microbatches and sizes its buffers by the first (pytorch#126600)")
    part = item.get("partition")
    if (not isinstance(part, list) or not part
            or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in part)):
        raise PlanRefused(f"{where}: field 'partition' must be a list of positive layer counts, "
                          f"got {part!r}")
    if sum(part) != n_layers:
        raise PlanRefused(f"{where}: field 'partition' {part} covers {sum(part)} layers but the "
                          f"model has {n_layers}")
    C = len(part)
    if C % D:
        raise PlanRefused(f"{where}: {C} chunks cannot be spread over D = {D} ranks")
    v = C // D
    if "v" in item and item["v"] is not None and int(item["v"]) != v:
        raise PlanRefused(f"{where}: field 'v' is {item['v']} but the partition has {C} chunks "
                          f"on D = {D} ranks (v = {v})")
    if kind.layout == "single" and v != 1:
        raise PlanRefused(f"{where}: {cls} runs one chunk per rank (partition of {D}), "
                          f"got {C} chunks")
    if kind.layout == "v" and v != 2:
        raise PlanRefused(f"{where}: {cls} runs exactly 2 chunks per rank (partition of "
                          f"{2 * D}), got {C} chunks")
    if kind.layout == "loop" and v < 1:
        raise PlanRefused(f"{where}: {cls} needs at least one chunk per rank")
    if cls == "Schedule1F1B" and M < D:
        raise PlanRefused(f"{where}: Schedule1F1B needs M >= {D} stages, got M = {M}")
    if kind.layout == "loop" and cls != "ScheduleLoopedBFS":
        rounds = max(1, M // D)
        if M % rounds:
            raise PlanRefused(f"{where}: {cls} needs M to be a multiple of its rounds "
                              f"max(1, M // D) = {rounds}, got M = {M}")
    if cls == "ScheduleDualPipeV" and M < C:
        raise PlanRefused(f"{where}: ScheduleDualPipeV needs M >= {C} chunks, got M = {M}")
    known = {"schedule", "torch_class", "M", "partition", "v", "T_pred", "label"}
    T_pred = item.get("T_pred")
    default = f"{item.get('schedule', cls)}:M{M}:{'-'.join(map(str, part))}"
    return TorchEntry(
        label=str(item.get("label") or default),
        torch_class=cls,
        M=M,
        partition=list(part),
        v=v,
        T_pred=float(T_pred) if T_pred is not None else None,
        extra={k: val for k, val in item.items() if k not in known},
    )


@dataclass
class TorchMultiSpec:
    """Everything the processes of one torch-schedules launch need (JSON), one rank per
    process. ``D`` is the world size; each entry brings its own partition into chunks."""

    run_id: str
    model: str
    config: dict[str, Any]
    B: int
    D: int
    entries: list[TorchEntry]
    dtype: str = "float32"
    seed: int = 0
    rounds: int = 10
    warmup: int = 2
    optimizer: str = "adam"
    lr: float = 1e-6
    backend: str = "gloo"
    timeout_s: float = 300.0
    threads: int = 1
    out_dir: str = "."
    dump_grads: bool = False

    def __post_init__(self) -> None:
        for name, value, valid in (("dtype", self.dtype, DTYPE_NAMES),
                                   ("optimizer", self.optimizer, OPTIMIZERS),
                                   ("backend", self.backend, BACKENDS)):
            if value not in valid:
                raise PlanRefused(f"{name} {value!r}: expected one of {', '.join(valid)}")
        labels = [e.label for e in self.entries]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise PlanRefused(f"two entries share the label {dup[0]!r}")

    @property
    def S(self) -> int:
        """Processes to launch (the launcher's name for it)."""
        return self.D

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TorchMultiSpec:
        data = dict(data)
        data["entries"] = [TorchEntry(**e) for e in data["entries"]]
        return cls(**data)

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(json.dumps(self.to_dict()) + "\n", encoding="utf-8")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> TorchMultiSpec:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
