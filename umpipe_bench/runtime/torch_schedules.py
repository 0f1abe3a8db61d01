"""torch.distributed.pipelining's schedules as jobs: which chunks each rank holds, what torch
accepts, and the plain-data spec a launch hands to its processes (docs/MODEL.md §5).

A torch schedule runs ``C = D * v`` chunks (contiguous groups of the model's layers) on ``D``
ranks, each chunk a ``PipelineStage``. The schedules, their chunk-to-rank layouts (``one``,
``loop``, ``v``) and the ``(D, M, v)`` torch's constructors refuse (torch 2.13) are
:mod:`umpipe_bench.torch_schedules`'s; where each chunk runs is
:func:`umpipe_bench.layout.chunk_devices`.

Every microbatch has ``B / M`` samples: torch cuts the batch with ``tensor_split`` and sizes
its receive buffers by the first microbatch, so ``M`` must divide ``B`` (pytorch#126600).
:func:`make_entry` checks that, the partition, and torch's own rules, so a plan torch would
refuse is refused before any process starts. Pure: no torch import.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, ClassVar

from ..torch_schedules import (
    ScheduleNameError,
    ScheduleShapeError,
    TorchSchedule,
    check,
    schedule_info,
)
from .chunk_job import ChunkEntry, check_chunk_entries
from .errors import PlanRefused
from .spec import JsonSpec, check_run_names

__all__ = [
    "WORKLOADS",
    "TorchEntry",
    "TorchMultiSpec",
    "chunk_layers",
    "make_entry",
]


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
    # four times the compute per sample (sequence 64, 64-pixel images): a torch action's fixed
    # cost (its Python, its messages) is then a smaller share of its time
    "gpt1-mini-b16-seq64": {
        "model": "gpt1-mini",
        "config": {"seq": 64, "vocab": 4096, "d_model": 256, "heads": 4, "mlp": 1024,
                   "blocks": 12},
        "B": 16,
        "layers": 14,
    },
    "vgg16-mini-b16-px64": {
        "model": "vgg16-mini",
        "config": {"image": 64, "width": 40, "fc": 512, "classes": 10},
        "B": 16,
        "layers": 16,
    },
}


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
    def kind(self) -> TorchSchedule:
        """The schedule's registry entry (layout, split backward)."""
        return schedule_info(self.torch_class)


def make_entry(
    item: dict[str, Any], *, D: int, B: int, n_layers: int, index: int = 0
) -> TorchEntry:
    """Check one entry of a predictor's JSON (``schedule``, ``torch_class``, ``M``,
    ``partition``, optional ``v`` and ``T_pred``) against torch's rules; errors name the entry
    and the field. The schedule is ``torch_class`` or, without one, ``schedule``, either
    spelled as :func:`umpipe_bench.torch_schedules.schedule_info` accepts."""
    where = f"entry {index} ({item.get('schedule', item.get('torch_class', '?'))!r})"
    cls = item.get("torch_class")
    try:
        info = schedule_info(cls if cls is not None else item.get("schedule", ""))
    except ScheduleNameError as e:
        what = ("field 'torch_class' must be a torch schedule" if cls is not None
                else "no 'torch_class', and field 'schedule'")
        raise PlanRefused(f"{where}: {what}: {e}") from None
    cls = info.torch_class
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
    if info.layout == "one" and v != 1:
        raise PlanRefused(f"{where}: {cls} runs one chunk per rank (partition of {D}), "
                          f"got {C} chunks")
    if info.layout == "v" and v != 2:
        raise PlanRefused(f"{where}: {cls} runs exactly 2 chunks per rank (partition of "
                          f"{2 * D}), got {C} chunks")
    try:
        check(info.name, D, M, v)
    except ScheduleShapeError as e:
        raise PlanRefused(f"{where}: {e}") from None
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
class TorchMultiSpec(JsonSpec):
    """Everything the processes of one torch-schedules launch need (JSON), one rank per
    process. ``D`` is the world size; each entry brings its own partition into chunks.

    ``chunks`` are chunk plans (:class:`.chunk_job.ChunkEntry`) that the same launch runs
    through the runtime's own executor (:mod:`.chunk_worker`'s wiring), in the same rotating
    rounds as the torch entries, on the same parameters, batch, threads and optimizer: the
    planned plan against torch's schedules in one launch. ``prefetch`` is theirs (receive
    threads on gloo, as ``execute`` runs them)."""

    ENTRY: ClassVar[type] = TorchEntry

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
    chunks: list[ChunkEntry] = field(default_factory=list)
    prefetch: bool = True

    def __post_init__(self) -> None:
        check_run_names(self)
        check_chunk_entries(self.chunks, self.D, self.B)
        labels = [e.label for e in (*self.entries, *self.chunks)]
        dup = sorted({x for x in labels if labels.count(x) > 1})
        if dup:
            raise PlanRefused(f"two entries share the label {dup[0]!r}")

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        data = dict(data)
        data["chunks"] = [ChunkEntry(**c) for c in data.get("chunks", [])]
        return super().from_dict(data)

    @property
    def S(self) -> int:
        """Processes to launch (the launcher's name for it)."""
        return self.D
