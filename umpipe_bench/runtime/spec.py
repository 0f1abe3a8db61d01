"""The job a launch runs: stages to build, entries (plans) to time, settings (docs/MODEL.md §5).

A :class:`RunSpec` is plain data (JSON) so that the launcher can hand it to ``torchrun``
workers, and so that a worker needs neither the problem file nor the core's schedule builder:
it receives the exact per-stage operation lists it must run.
"""

from __future__ import annotations

import json
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, ClassVar

from ..files import write_text

__all__ = ["BACKENDS", "DTYPE_NAMES", "ENGINES", "OPTIMIZERS", "Entry", "RunSettings", "RunSpec"]

#: "umpipe": our executor runs ``ops``; "torch": torch.distributed.pipelining runs EDP(M).
ENGINES = ("umpipe", "torch")
#: What a spec may name; checked when the spec is built, before any process starts
#: (``stages.DTYPES`` maps the dtype names to torch dtypes; a test keeps them equal).
DTYPE_NAMES = ("float32", "float64", "bfloat16", "float16")
OPTIMIZERS = ("none", "sgd", "adam", "adamw")
BACKENDS = ("gloo", "nccl")


@dataclass
class Entry:
    """One thing to time: a plan under a schedule, run by one engine.

    ``ops[s]`` is stage ``s``'s operation list as ``[kind, index, start, stop]`` items, exactly
    as :func:`umpipe_bench.schedules.build_schedule` produced it (docs/MODEL.md §3). For the torch
    engine ``ops`` is empty and ``M`` is the number of equal microbatches.
    """

    label: str
    engine: str
    schedule: str
    mode: str
    fwd: list[list[int]]
    bwd: list[list[int]]
    ops: list[list[list[Any]]] = field(default_factory=list)
    M: int | None = None
    #: torch engine only: the labels of our entries that run the same plan (its peers)
    twins: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.engine not in ENGINES:
            raise ValueError(f"entry {self.label!r}: engine must be one of {ENGINES}")


def check_run_names(spec: Any) -> None:
    """Refuse a spec's ``dtype``, ``optimizer`` or ``backend`` that no process could use
    (:class:`.errors.PlanRefused`, before launching)."""
    from .errors import PlanRefused

    for name, value, valid in (("dtype", spec.dtype.lower().removeprefix("torch."),
                                DTYPE_NAMES),
                               ("optimizer", spec.optimizer.lower(), OPTIMIZERS),
                               ("backend", spec.backend, BACKENDS)):
        if value not in valid:
            raise PlanRefused(f"{name} {getattr(spec, name)!r}: expected one of "
                              f"{', '.join(valid)}")


@dataclass
class JsonSpec:
    """A launch's spec as the JSON its processes read: a dataclass whose ``entries`` are
    dataclasses of type :attr:`ENTRY`."""

    ENTRY: ClassVar[type]

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)  # type: ignore[call-overload]

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Any:
        data = dict(data)
        data["entries"] = [cls.ENTRY(**e) for e in data["entries"]]
        return cls(**data)

    def save(self, path: str | os.PathLike[str]) -> None:
        write_text(path, json.dumps(self.to_dict()) + "\n", parents=True)

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Any:
        return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))


@dataclass(kw_only=True)
class RunSettings(JsonSpec):
    """The settings every executed plan's launch shares (keyword-only, with defaults):
    numbers, optimizer, process group, where the processes write, what the run is of."""

    dtype: str = "float32"
    seed: int = 0
    iters: int = 10
    warmup: int = 2
    optimizer: str = "sgd"
    lr: float = 1e-6
    backend: str = "gloo"
    timeout_s: float = 300.0
    threads: int = 1
    out_dir: str = "."
    dump_grads: bool = False
    prefetch: bool = True
    problem: str = ""


@dataclass
class RunSpec(RunSettings):
    """Everything a worker needs. ``layers_per_stage`` is a list of per-stage layer-index lists."""

    ENTRY: ClassVar[type] = Entry

    run_id: str
    model: str
    config: dict[str, Any]
    layers_per_stage: list[list[int]]
    B: int
    entries: list[Entry]

    def __post_init__(self) -> None:
        """Refuse names no worker could use (fail before launching)."""
        check_run_names(self)

    @property
    def S(self) -> int:
        return len(self.layers_per_stage)
