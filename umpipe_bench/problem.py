"""Problems: one training iteration of one model on one machine layout (docs/MODEL.md §1).

A :class:`Problem` holds per-stage cost tables measured at a grid of microbatch sizes and read at
any size ``m`` in ``1..B`` by piecewise-linear interpolation, the links between neighbouring
stages, optional memory figures and the provenance of every number. Problem files are JSON with
``"schema": "umpipe-problem/1"``; :func:`Problem.load` validates everything and names the file,
field and stage of the first thing that is wrong.

This module imports no torch.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from functools import cached_property
from itertools import pairwise
from typing import Any

import numpy as np

from . import schema as sc
from .errors import InputError
from .files import write_text

__all__ = [
    "BWD_FAR_RANGE",
    "LIMITS",
    "SCHEMA",
    "SPLIT_KINDS",
    "Link",
    "Problem",
    "ProblemError",
    "ProblemTables",
    "StageCosts",
    "StageMemory",
    "atomic_write_text",
]

SCHEMA = "umpipe-problem/1"
_COST_KINDS = ("fwd", "bwd", "rbwd")
#: the optional split-backward tables (docs/MODEL.md §1c): input-gradient pass in stash mode,
#: recompute-forward + input-gradient pass in recompute mode, weight-gradient pass
SPLIT_KINDS = ("ibwd", "ribwd", "wbwd")
#: the range a stage's backward locality factor ``bwd_far`` may take (docs/MODEL.md §1b)
BWD_FAR_RANGE = (0.25, 4.0)
#: Inclusive limits of a problem's stage count and mini-batch size, for files as for the
#: generated simulation networks (docs/SIMNETS.md, "Names")
LIMITS = {"S": (1, 128), "B": (1, 2048)}


#: a malformed problem (file); the message names the file, field and stage
ProblemError = InputError


def atomic_write_text(path: str | os.PathLike[str], text: str) -> None:
    """Write ``text`` to ``path`` through :func:`umpipe_bench.files.write_text` (a temporary
    file and a rename: a reader never sees a half-written file), making missing folders."""
    write_text(path, text, parents=True)


@dataclass(frozen=True)
class StageMemory:
    """Memory figures of one stage, in bytes (docs/MODEL.md §1)."""

    param_bytes: float
    saved_act_bytes_per_sample: float
    input_bytes_per_sample: float
    #: the stage's device memory (bytes) when known: a cap for planning (docs/SCHEDULES.md §4)
    capacity_bytes: float | None = None
    #: bytes per sample a microbatch still holds between its input-gradient pass and its
    #: weight-gradient pass (docs/MODEL.md §1c); None: not measured (taken as all saved bytes)
    w_held_bytes_per_sample: float | None = None


@dataclass(frozen=True)
class StageCosts:
    """Measured costs of one stage: one value per size of the problem's grid (seconds)."""

    fwd: tuple[float, ...]
    bwd: tuple[float, ...]
    rbwd: tuple[float, ...]
    opt: float = 0.0
    memory: StageMemory | None = None
    name: str = ""
    extra: Mapping[str, Any] = field(default_factory=dict)
    #: far/near ratio of a stash backward whose forward did not run just before it
    #: (docs/MODEL.md §1b); None: not profiled, the factor 1
    bwd_far: float | None = None
    #: split backward (docs/MODEL.md §1c), one value per size each, or None when not profiled:
    #: ``ibwd`` input-gradient pass (stash), ``ribwd`` recompute forward + input-gradient pass
    #: (recompute), ``wbwd`` weight-gradient pass (both modes)
    ibwd: tuple[float, ...] | None = None
    ribwd: tuple[float, ...] | None = None
    wbwd: tuple[float, ...] | None = None


@dataclass(frozen=True)
class Link:
    """Boundary ``s -> s+1``: bytes per sample each way and the link's latency and bandwidth.

    ``comm(m) = latency + m * bytes / bandwidth`` (docs/MODEL.md §1).
    """

    act_bytes: float
    grad_bytes: float
    latency: float
    bandwidth: float

    def act_time(self, m: float) -> float:
        return self.latency + m * self.act_bytes / self.bandwidth

    def grad_time(self, m: float) -> float:
        return self.latency + m * self.grad_bytes / self.bandwidth


@dataclass(frozen=True)
class ProblemTables:
    """Dense float64 tables indexed by size ``m = 0..B`` (index 0 holds 0.0).

    ``fwd``, ``bwd``, ``rbwd``: ``[S, B+1]``; ``opt``: ``[S]``; ``act``, ``grad``: ``[S-1, B+1]``
    (boundary ``s -> s+1``). ``bwd_far`` ``[S, B+1]`` is ``bwd[s]`` times the stage's factor
    (:meth:`Problem.far_factor`), the cost of a *far* stash backward (docs/MODEL.md §1b).
    Fast evaluators read these instead of interpolating.
    """

    fwd: np.ndarray
    bwd: np.ndarray
    rbwd: np.ndarray
    opt: np.ndarray
    act: np.ndarray
    grad: np.ndarray
    bwd_far: np.ndarray
    #: split backward tables ``[S, B+1]`` (docs/MODEL.md §1c); None when the problem has none
    ibwd: np.ndarray | None = None
    ribwd: np.ndarray | None = None
    wbwd: np.ndarray | None = None

    def input_backward(self, mode: str) -> np.ndarray:
        """The input-gradient pass table of a memory mode (``ibwd`` or ``ribwd``)."""
        table = self.ibwd if mode == "stash" else self.ribwd
        if table is None:
            raise ProblemError("the problem has no split-backward costs (ibwd/ribwd/wbwd)")
        return table

    def backward(self, mode: str) -> np.ndarray:
        """The (near) backward cost table of a memory mode: ``bwd`` (stash) or ``rbwd``
        (recompute)."""
        return self.bwd if mode == "stash" else self.rbwd

    def backward_far(self, mode: str) -> np.ndarray:
        """The cost table of a *far* backward (docs/MODEL.md §1b): ``bwd * far`` in stash
        mode; ``rbwd`` in recompute mode, which re-runs its forward and is never far."""
        return self.bwd_far if mode == "stash" else self.rbwd


def _interp_table(sizes: Sequence[int], values: Sequence[float], B: int) -> np.ndarray:
    out = np.zeros(B + 1, dtype=np.float64)
    out[1:] = np.interp(np.arange(1, B + 1, dtype=np.float64), sizes, values)
    return out


@dataclass(frozen=True)
class Problem:
    """One training iteration of one model on one layout (docs/MODEL.md §1).

    Construct through :meth:`from_dict` / :meth:`load` (validated) or directly followed by
    :meth:`validate`.
    """

    name: str
    B: int
    sizes: tuple[int, ...]
    stages: tuple[StageCosts, ...]
    links: tuple[Link, ...]
    provenance: Mapping[str, Any] = field(default_factory=dict)
    device_capacity: float | None = None
    description: str = ""

    # ----------------------------------------------------------------- accessors
    @property
    def S(self) -> int:
        return len(self.stages)

    @property
    def device(self) -> str:
        return str(self.provenance.get("device", "?"))

    @property
    def source(self) -> str:
        return str(self.provenance.get("source", "?"))

    @cached_property
    def _tables(self) -> ProblemTables:
        B = self.B
        fwd = np.stack([_interp_table(self.sizes, st.fwd, B) for st in self.stages])
        bwd = np.stack([_interp_table(self.sizes, st.bwd, B) for st in self.stages])
        rbwd = np.stack([_interp_table(self.sizes, st.rbwd, B) for st in self.stages])
        opt = np.array([st.opt for st in self.stages], dtype=np.float64)
        m = np.arange(B + 1, dtype=np.float64)
        act = np.zeros((max(self.S - 1, 0), B + 1))
        grad = np.zeros((max(self.S - 1, 0), B + 1))
        for s, ln in enumerate(self.links):
            act[s, 1:] = ln.latency + m[1:] * ln.act_bytes / ln.bandwidth
            grad[s, 1:] = ln.latency + m[1:] * ln.grad_bytes / ln.bandwidth
        far = np.array([self.far_factor(s) for s in range(self.S)], dtype=np.float64)
        bwd_far = bwd * far[:, None]  # factor 1.0: exactly bwd
        split: dict[str, np.ndarray | None] = dict.fromkeys(SPLIT_KINDS)
        if self.has_split_backward:
            for kind in SPLIT_KINDS:
                split[kind] = np.stack([_interp_table(self.sizes, getattr(st, kind), B)
                                        for st in self.stages])
        for arr in (fwd, bwd, rbwd, opt, act, grad, bwd_far, *split.values()):
            if arr is not None:
                arr.setflags(write=False)
        return ProblemTables(fwd=fwd, bwd=bwd, rbwd=rbwd, opt=opt, act=act, grad=grad,
                             bwd_far=bwd_far, **split)

    @property
    def has_split_backward(self) -> bool:
        """Whether every stage carries the split-backward tables (docs/MODEL.md §1c)."""
        return all(st.ibwd is not None for st in self.stages)

    def tables(self) -> ProblemTables:
        """Dense read-only tables over ``m = 0..B`` (computed once per problem)."""
        return self._tables

    def _check_m(self, m: int) -> int:
        if not 1 <= m <= self.B:
            raise ValueError(f"problem {self.name!r}: size m={m} outside 1..B={self.B}")
        return int(m)

    def fwd(self, s: int, m: int) -> float:
        return float(self._tables.fwd[s, self._check_m(m)])

    def bwd(self, s: int, m: int) -> float:
        return float(self._tables.bwd[s, self._check_m(m)])

    def rbwd(self, s: int, m: int) -> float:
        return float(self._tables.rbwd[s, self._check_m(m)])

    def backward_cost(self, s: int, m: int, mode: str, far: bool = False) -> float:
        """``c[s](m)`` of docs/MODEL.md §4: ``bwd`` in stash mode, ``rbwd`` in recompute mode;
        ``far``: a stash backward not directly after its own forward (docs/MODEL.md §1b)."""
        if mode != "stash":
            return self.rbwd(s, m)
        tab = self._tables.bwd_far if far else self._tables.bwd
        return float(tab[s, self._check_m(m)])

    def far_factor(self, s: int) -> float:
        """Stage ``s``'s backward locality factor ``bwd_far`` (docs/MODEL.md §1b; 1.0 when
        the problem file has none)."""
        f = self.stages[s].bwd_far
        return 1.0 if f is None else float(f)

    def with_bwd_far(self, factors: float | Sequence[float | None] | None) -> Problem:
        """The same problem with other backward locality factors (docs/MODEL.md §1b): one
        number for all stages, one per stage (None: absent), or None to drop them all."""
        from dataclasses import replace

        fs = [factors] * self.S if not isinstance(factors, Sequence) else list(factors)
        if len(fs) != self.S:
            raise ProblemError(f"problem {self.name!r}: {len(fs)} factors 'bwd_far' for S = "
                               f"{self.S} stages")
        stages = tuple(replace(st, bwd_far=None if f is None else float(f))
                       for st, f in zip(self.stages, fs))
        return replace(self, stages=stages).validate()

    def opt(self, s: int) -> float:
        return float(self.stages[s].opt)

    def comm_act(self, s: int, m: int) -> float:
        """Forward transfer time of ``m`` samples over boundary ``s -> s+1``."""
        return float(self._tables.act[s, self._check_m(m)])

    def comm_grad(self, s: int, m: int) -> float:
        """Backward transfer time of ``m`` samples over boundary ``s -> s+1`` (sent by s+1)."""
        return float(self._tables.grad[s, self._check_m(m)])

    def with_memory_cap(self, cap: float | Sequence[float]) -> Problem:
        """The same problem with every stage's device memory set to ``cap`` bytes (one number
        for all stages, or one per stage): ``--memory-cap`` (docs/SCHEDULES.md §4). Needs the
        stages' memory figures."""
        from dataclasses import replace

        missing = [s for s, st in enumerate(self.stages) if st.memory is None]
        if missing:
            raise ProblemError(f"problem {self.name!r}: a memory cap needs memory figures, but "
                               f"stage {missing[0]} has no field 'memory'")
        caps = [cap] * self.S if not isinstance(cap, Sequence) else list(cap)
        if len(caps) != self.S:
            raise ProblemError(f"problem {self.name!r}: {len(caps)} memory caps for S = "
                               f"{self.S} stages")
        for s, c in enumerate(caps):
            if not _is_pos(c):
                raise ProblemError(f"memory cap of stage {s} must be positive finite bytes, "
                                   f"got {c!r}")
        stages = tuple(replace(st, memory=replace(st.memory, capacity_bytes=float(c)))
                       for st, c in zip(self.stages, caps))
        return replace(self, stages=stages)

    def with_name(self, name: str) -> Problem:
        from dataclasses import replace

        return replace(self, name=name)

    # ----------------------------------------------------------------- validation
    def validate(self, where: str | None = None) -> Problem:
        """Check every field; raise :class:`ProblemError` naming file, field and stage."""
        at = where or f"problem {self.name!r}"

        def fail(msg: str) -> None:
            raise ProblemError(f"{at}: {msg}")

        if not isinstance(self.B, int) or isinstance(self.B, bool) or self.B < 1:
            fail(f"field 'B' must be a positive integer, got {self.B!r}")
        sizes = list(self.sizes)
        if not sizes:
            fail("field 'sizes' is empty; expected sizes covering 1..B")
        for v in sizes:
            if not isinstance(v, int) or isinstance(v, bool):
                fail(f"field 'sizes' must hold integers, got {v!r}")
        if any(b <= a for a, b in pairwise(sizes)):
            fail(f"field 'sizes' must be strictly increasing, got {sizes}")
        if sizes[0] != 1 or sizes[-1] != self.B:
            fail(f"field 'sizes' must cover 1..B={self.B} (first 1, last B), got {sizes}")
        if not self.stages:
            fail("field 'stages' is empty; expected at least one stage")
        if 0 < sum(st.ibwd is not None for st in self.stages) < self.S:
            fail("split-backward fields (ibwd/ribwd/wbwd) must be given for every stage or none")
        for s, st in enumerate(self.stages):
            for kind in _COST_KINDS:
                vals = getattr(st, kind)
                if len(vals) != len(sizes):
                    fail(
                        f"stage {s} field '{kind}' has {len(vals)} values; expected one per size "
                        f"({len(sizes)}: {sizes})"
                    )
                for i, v in enumerate(vals):
                    if not _is_pos(v):
                        fail(
                            f"stage {s} field '{kind}' at size {sizes[i]} must be a positive "
                            f"finite time in seconds, got {v!r}"
                        )
            present = [k for k in SPLIT_KINDS if getattr(st, k) is not None]
            if present and len(present) != len(SPLIT_KINDS):
                missing = [k for k in SPLIT_KINDS if k not in present]
                fail(f"stage {s} has split-backward field(s) {present} but not {missing}; "
                     f"expected all of {list(SPLIT_KINDS)} or none")
            for kind in present:
                vals = getattr(st, kind)
                if len(vals) != len(sizes):
                    fail(f"stage {s} field '{kind}' has {len(vals)} values; expected one per "
                         f"size ({len(sizes)}: {sizes})")
                for i, v in enumerate(vals):
                    if not _is_pos(v):
                        fail(f"stage {s} field '{kind}' at size {sizes[i]} must be a positive "
                             f"finite time in seconds, got {v!r}")
            if not _is_finite(st.opt) or st.opt < 0:
                fail(f"stage {s} field 'opt' must be a non-negative finite time, got {st.opt!r}")
            if st.bwd_far is not None and not (
                    _is_finite(st.bwd_far) and BWD_FAR_RANGE[0] <= st.bwd_far <= BWD_FAR_RANGE[1]):
                fail(f"stage {s} field 'bwd_far' must be a far/near backward time ratio in "
                     f"[{BWD_FAR_RANGE[0]}, {BWD_FAR_RANGE[1]}], got {st.bwd_far!r}")
            if st.memory is not None:
                for f_ in ("param_bytes", "saved_act_bytes_per_sample", "input_bytes_per_sample"):
                    v = getattr(st.memory, f_)
                    if not _is_finite(v) or v < 0:
                        fail(f"stage {s} field 'memory.{f_}' must be >= 0, got {v!r}")
                cap = st.memory.capacity_bytes
                if cap is not None and not _is_pos(cap):
                    fail(f"stage {s} field 'memory.capacity_bytes' must be positive bytes, "
                         f"got {cap!r}")
                held = st.memory.w_held_bytes_per_sample
                if held is not None and (not _is_finite(held) or held < 0):
                    fail(f"stage {s} field 'memory.w_held_bytes_per_sample' must be >= 0, "
                         f"got {held!r}")
        if len(self.links) != len(self.stages) - 1:
            fail(
                f"field 'links' has {len(self.links)} entries; expected S-1 = "
                f"{len(self.stages) - 1} (one per boundary)"
            )
        for s, ln in enumerate(self.links):
            for f_ in ("act_bytes", "grad_bytes", "latency"):
                v = getattr(ln, f_)
                if not _is_finite(v) or v < 0:
                    fail(f"link {s} (stage {s} -> {s + 1}) field '{f_}' must be >= 0, got {v!r}")
            if not _is_pos(ln.bandwidth):
                fail(
                    f"link {s} (stage {s} -> {s + 1}) field 'bandwidth' must be a positive "
                    f"number of bytes/s, got {ln.bandwidth!r}"
                )
        if self.device_capacity is not None and not _is_pos(self.device_capacity):
            fail(f"field 'device_capacity' must be positive bytes, got {self.device_capacity!r}")
        return self

    def digest(self, split: bool = False, capacities: bool = True) -> str:
        """A hash of everything that determines the costs of our plans (the key of leaderboard
        rows and best-known entries).

        The split-backward tables (``ibwd``, ``ribwd``, ``wbwd``,
        ``memory.w_held_bytes_per_sample`` and their provenance) are left out unless ``split``:
        no plan of ours uses them, only the zero-bubble torch schedules do, so profiling them
        into a problem file keeps the digests of its leaderboard rows and best-known plans.
        ``split=True`` hashes the whole file. ``capacities=False`` leaves out the memory
        capacities (``device_capacity``, ``memory.capacity_bytes``): a plan file's
        ``meta.problem_digest``, so that a plan made under a memory cap names the same problem
        as the uncapped one (a cap constrains a run; it changes no cost).
        """
        key = (bool(split), bool(capacities))
        if key not in self._digests:  # a problem is immutable: hashed once per kind
            self._digests[key] = self._digest(split, capacities)
        return self._digests[key]

    @cached_property
    def _digests(self) -> dict[tuple[bool, bool], str]:
        return {}

    def _digest(self, split: bool, capacities: bool) -> str:
        import hashlib

        data = self.to_dict()
        if not capacities:
            data.pop("device_capacity", None)
            for st in data["stages"]:
                st.get("memory", {}).pop("capacity_bytes", None)
        if not split:
            for st in data["stages"]:
                for kind in SPLIT_KINDS:
                    st.pop(kind, None)
                if "memory" in st:
                    st["memory"].pop("w_held_bytes_per_sample", None)
                st.get("extra", {}).pop("split_backward", None)
            data["provenance"].pop("split_backward", None)
        text = json.dumps(data, indent=1) + "\n"
        return hashlib.sha256(text.encode()).hexdigest()[:16]

    # ----------------------------------------------------------------- (de)serialization
    def to_dict(self) -> dict[str, Any]:
        stages = []
        for st in self.stages:
            d: dict[str, Any] = {
                "fwd": list(st.fwd),
                "bwd": list(st.bwd),
                "rbwd": list(st.rbwd),
                "opt": st.opt,
            }
            if st.name:
                d["name"] = st.name
            if st.bwd_far is not None:
                d["bwd_far"] = st.bwd_far
            for kind in SPLIT_KINDS:
                if getattr(st, kind) is not None:
                    d[kind] = list(getattr(st, kind))
            if st.memory is not None:
                d["memory"] = {
                    "param_bytes": st.memory.param_bytes,
                    "saved_act_bytes_per_sample": st.memory.saved_act_bytes_per_sample,
                    "input_bytes_per_sample": st.memory.input_bytes_per_sample,
                }
                if st.memory.capacity_bytes is not None:
                    d["memory"]["capacity_bytes"] = st.memory.capacity_bytes
                if st.memory.w_held_bytes_per_sample is not None:
                    d["memory"]["w_held_bytes_per_sample"] = st.memory.w_held_bytes_per_sample
            if st.extra:
                d["extra"] = dict(st.extra)
            stages.append(d)
        out: dict[str, Any] = {
            "schema": SCHEMA,
            "name": self.name,
            "description": self.description,
            "B": self.B,
            "sizes": list(self.sizes),
            "stages": stages,
            "links": [
                {
                    "act_bytes": ln.act_bytes,
                    "grad_bytes": ln.grad_bytes,
                    "latency": ln.latency,
                    "bandwidth": ln.bandwidth,
                }
                for ln in self.links
            ],
            "provenance": dict(self.provenance),
        }
        if self.device_capacity is not None:
            out["device_capacity"] = self.device_capacity
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any], where: str = "problem") -> Problem:
        """Build and validate a problem from its JSON form; errors name ``where`` and the field
        (:data:`SPEC`, then :meth:`validate`)."""
        if not isinstance(data, Mapping):
            raise ProblemError(f"{where}: expected a JSON object, got {sc.describe(data)}")
        schema = data.get("schema")
        if schema != SCHEMA:
            raise ProblemError(f"{where}: unknown schema version {schema!r}; expected "
                               f"{SCHEMA!r}")
        sc.check(data, SPEC, where, ProblemError)
        stages = []
        for st in data["stages"]:
            mem = st.get("memory")
            memory = None if mem is None else StageMemory(
                param_bytes=mem["param_bytes"],
                saved_act_bytes_per_sample=mem["saved_act_bytes_per_sample"],
                input_bytes_per_sample=mem["input_bytes_per_sample"],
                capacity_bytes=mem.get("capacity_bytes"),
                w_held_bytes_per_sample=mem.get("w_held_bytes_per_sample"),
            )
            stages.append(
                StageCosts(
                    fwd=tuple(st["fwd"]),
                    bwd=tuple(st["bwd"]),
                    rbwd=tuple(st["rbwd"]),
                    opt=st["opt"],
                    memory=memory,
                    name=st.get("name", ""),
                    extra=dict(st.get("extra", {})),
                    bwd_far=st.get("bwd_far"),
                    **{k: tuple(st[k]) for k in SPLIT_KINDS if k in st},
                )
            )
        links = [Link(act_bytes=ln["act_bytes"], grad_bytes=ln["grad_bytes"],
                      latency=ln["latency"], bandwidth=ln["bandwidth"])
                 for ln in data["links"]]
        prob = cls(
            name=data["name"],
            B=data["B"],
            sizes=tuple(data["sizes"]),
            stages=tuple(stages),
            links=tuple(links),
            provenance=dict(data.get("provenance") or {}),
            device_capacity=data.get("device_capacity"),
            description=data.get("description", ""),
        )
        return prob.validate(where)

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), indent=1) + "\n"

    def save(self, path: str | os.PathLike[str]) -> None:
        """Write the problem file atomically (never half-written)."""
        self.validate()
        atomic_write_text(path, self.to_json())

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Problem:
        """Read and validate a problem file; errors name the file, field and stage."""
        where = f"problem file {str(path)!r}"
        return cls.from_dict(sc.load_json(path, where, ProblemError), where)


#: positivity is checked by :meth:`Problem.validate`, which names the size
_TIMES = sc.List(sc.Num(what="a time in seconds"), min_len=1)
_BYTES = sc.Num(lo=0, what="a number of bytes")
_MEMORY = sc.Obj((
    sc.Field("param_bytes", _BYTES, required=True),
    sc.Field("saved_act_bytes_per_sample", _BYTES, required=True),
    sc.Field("input_bytes_per_sample", _BYTES, required=True),
    sc.Field("capacity_bytes", sc.Num(lo=0, lo_open=True, what="a number of bytes",
                                      nullable=True)),
    sc.Field("w_held_bytes_per_sample", sc.Num(lo=0, what="a number of bytes", nullable=True)),
), what="an object of memory figures")
_STAGE = sc.Obj((
    *(sc.Field(k, _TIMES, required=True) for k in _COST_KINDS),
    sc.Field("opt", sc.Num(lo=0, what="a time in seconds"), required=True),
    sc.Field("name", sc.Str()),
    sc.Field("memory", sc.Obj(_MEMORY.fields, what=_MEMORY.what, nullable=True)),
    sc.Field("extra", sc.Map()),
    sc.Field("bwd_far", sc.Num(lo=BWD_FAR_RANGE[0], hi=BWD_FAR_RANGE[1],
                               what="a far/near backward time ratio", nullable=True)),
    *(sc.Field(k, _TIMES) for k in SPLIT_KINDS),
), what="a stage object")
_LINK = sc.Obj((
    *(sc.Field(k, _BYTES, required=True) for k in ("act_bytes", "grad_bytes")),
    sc.Field("latency", sc.Num(lo=0, what="a time in seconds"), required=True),
    sc.Field("bandwidth", sc.Num(lo=0, lo_open=True, what="a bandwidth in bytes/s"), required=True),
), what="a link object")
#: The problem file's schema (docs/MODEL.md §1); relations between fields (one value per
#: size, sizes covering ``1..B``, ``S - 1`` links) are :meth:`Problem.validate`'s.
SPEC = sc.Obj((
    sc.Field("schema", sc.Str(choices=(SCHEMA,)), required=True),
    sc.Field("name", sc.Str(), required=True),
    sc.Field("description", sc.Str()),
    sc.Field("B", sc.Int(*LIMITS["B"]), required=True),
    sc.Field("sizes", sc.List(sc.Int(lo=1), min_len=1), required=True),
    sc.Field("stages", sc.List(_STAGE, *LIMITS["S"]), required=True),
    sc.Field("links", sc.List(_LINK), required=True),
    sc.Field("provenance", sc.Map()),
    sc.Field("device_capacity", sc.Num(lo=0, lo_open=True, what="a number of bytes",
                                       nullable=True)),
), what="a problem object")


def _is_finite(v: Any) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def _is_pos(v: Any) -> bool:
    return _is_finite(v) and v > 0
