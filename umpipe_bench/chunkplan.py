"""Chunk plans: unequal microbatches for schedules with several chunks per device and a split
backward (docs/CHUNK-SCHEDULES.md §1).

A chunk plan extends a plan (docs/MODEL.md §2) from one stage per device to the schedules
torch ships: the model's ``L`` layers cut into ``C`` chunks placed on ``D`` devices by a layout
(:mod:`umpipe_bench.layout`: ``one``, ``loop`` with ``v`` chunks per device, or ``v``), and
per chunk ``c``

* a forward partition ``fwd[c]`` (``P[c]``) and a backward partition ``bwd[c]`` (``Q[c]``) of
  the ``B`` samples (stash: ``Q[c] = P[c]``; recompute: free);
* with ``split``, a weight-gradient partition ``wgt[c]`` (``R[c]``), a coarsening of ``Q[c]``:
  each ``W`` covers one or more consecutive input-gradient passes ``I`` (``R = Q``: one ``W``
  per ``I``);

and per device ``d``

* ``caps[d]``: the samples the device may hold between their forward and their backward
  (``B`` or ``I``), summed over its chunks (None: no cap);
* ``w_caps[d]`` (split only): the samples it may hold between their ``I`` and their ``W``
  (None: no cap; every ``W`` then waits for the device's last backward);
* ``group``: the samples of one interleaving round (None: ``B``), and per chunk ``fwd_lag``
  and ``bwd_lag`` (samples, None: 0), which order a device's chunks against each other
  (docs/CHUNK-SCHEDULES.md §2): a chunk's forwards of samples from ``a`` rank as if they
  started at ``a + fwd_lag[c]`` (its backwards: ``bwd_lag``), so a chunk whose inputs come late
  (the V shape's second leg) yields to one whose inputs come first.

Caps are per device, not per chunk: memory is a device's, and torch's interleaved schedules
bound what a device holds over all its chunks (their warm-up lets the first chunk fill while
the last one drains), which per-chunk caps cannot express.

The equal plans of torch's schedules are :func:`umpipe_bench.chunk_torch.torch_plan`. Plans
round-trip through JSON files (schema ``umpipe-chunk-plan/1``). This module imports no torch.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from . import schema as sc
from .codec import balanced_sizes
from .errors import InputError
from .layout import LAYOUT_KINDS, Layout, chunk_devices, device_chunks
from .problem import LIMITS, Problem, atomic_write_text

__all__ = [
    "CHUNK_PLAN_SCHEMA",
    "SPEC",
    "ChunkPlan",
    "ChunkPlanError",
    "is_coarsening",
]

CHUNK_PLAN_SCHEMA = "umpipe-chunk-plan/1"
MODES = ("stash", "recompute")

#: a chunk plan that is malformed or does not fit its problem; the message names the field
ChunkPlanError = InputError


def is_coarsening(coarse: Sequence[int], fine: Sequence[int]) -> bool:
    """Whether every boundary of ``coarse`` is a boundary of ``fine`` (same total): each
    part of ``coarse`` is a run of consecutive parts of ``fine``."""
    cuts, a = set(), 0
    for m in fine:
        a += m
        cuts.add(a)
    a = 0
    for m in coarse:
        a += m
        if a not in cuts:
            return False
    return True


def _parts(value: Any, name: str, C: int, B: int) -> tuple[tuple[int, ...], ...]:
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != C:
        raise ChunkPlanError(f"chunk plan field {name!r} must hold one partition per chunk "
                             f"(C = {C}), got {sc.describe(value)}")
    out = []
    for c, p in enumerate(value):
        if isinstance(p, (str, bytes)) or not isinstance(p, Sequence) or not p:
            raise ChunkPlanError(f"chunk plan field '{name}[{c}]' must be a non-empty list of "
                                 f"sizes, got {sc.describe(p)}")
        for j, m in enumerate(p):
            if isinstance(m, bool) or not isinstance(m, int) or m < 1:
                raise ChunkPlanError(f"chunk plan field '{name}[{c}][{j}]': size {m!r} must "
                                     "be an integer >= 1")
        if sum(p) != B:
            raise ChunkPlanError(f"chunk plan field '{name}[{c}]': {list(p)} sums to "
                                 f"{sum(p)}; expected B = {B}")
        out.append(tuple(int(m) for m in p))
    return tuple(out)


def _ints(value: Any, name: str, n: int, lo: int, per: str = "device"
          ) -> tuple[int, ...] | None:
    if value is None:
        return None
    if isinstance(value, (str, bytes)) or not isinstance(value, Sequence) or len(value) != n:
        raise ChunkPlanError(f"chunk plan field {name!r} must hold one number per {per} "
                             f"({'D' if per == 'device' else 'C'} = {n}), got "
                             f"{sc.describe(value)}")
    for d, k in enumerate(value):
        if isinstance(k, bool) or not isinstance(k, int) or k < lo:
            raise ChunkPlanError(f"chunk plan field '{name}[{d}]': {k!r} must be a whole "
                                 f"number of samples >= {lo}")
    return tuple(int(k) for k in value)


@dataclass(frozen=True)
class ChunkPlan:
    """A plan over chunks on devices (module docstring; docs/CHUNK-SCHEDULES.md §1)."""

    D: int
    layout: str
    layers: tuple[int, ...]
    fwd: tuple[tuple[int, ...], ...]
    bwd: tuple[tuple[int, ...], ...]
    mode: str = "stash"
    split: bool = False
    #: ``R[c]``; None with ``split``: ``R = Q``
    wgt: tuple[tuple[int, ...], ...] | None = None
    caps: tuple[int, ...] | None = None
    w_caps: tuple[int, ...] | None = None
    group: int | None = None
    fwd_lag: tuple[int, ...] | None = None
    bwd_lag: tuple[int, ...] | None = None
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        D = self.D
        if isinstance(D, bool) or not isinstance(D, int) or not 1 <= D <= LIMITS["S"][1]:
            raise ChunkPlanError(f"chunk plan field 'D' must be an integer in "
                                 f"1..{LIMITS['S'][1]}, got {D!r}")
        if self.layout not in LAYOUT_KINDS:
            raise ChunkPlanError(f"chunk plan field 'layout' must be one of "
                                 f"{', '.join(LAYOUT_KINDS)}, got {self.layout!r}")
        layers = self.layers
        if isinstance(layers, (str, bytes)) or not isinstance(layers, Sequence) or not layers \
                or any(isinstance(n, bool) or not isinstance(n, int) or n < 1 for n in layers):
            raise ChunkPlanError(f"chunk plan field 'layers' must list every chunk's layer "
                                 f"count (integers >= 1), got {sc.describe(layers)}")
        object.__setattr__(self, "layers", tuple(int(n) for n in layers))
        try:
            Layout(self.layout, D, self.layers)
        except InputError as exc:
            raise ChunkPlanError(f"chunk plan field 'layers': {exc}") from None
        if self.mode not in MODES:
            raise ChunkPlanError(f"chunk plan field 'mode' must be one of {', '.join(MODES)}, "
                                 f"got {self.mode!r}")
        if not isinstance(self.split, bool):
            raise ChunkPlanError(f"chunk plan field 'split' must be true or false, got "
                                 f"{sc.describe(self.split)}")
        C = len(self.layers)
        fwd0 = self.fwd[0] if isinstance(self.fwd, Sequence) and self.fwd else None
        B = sum(fwd0) if isinstance(fwd0, Sequence) and all(
            isinstance(m, int) for m in fwd0) else 0
        if not 1 <= B <= LIMITS["B"][1]:
            raise ChunkPlanError(f"chunk plan field 'fwd[0]' must be sizes summing to B in "
                                 f"1..{LIMITS['B'][1]}, got {sc.describe(fwd0)}")
        object.__setattr__(self, "fwd", _parts(self.fwd, "fwd", C, B))
        object.__setattr__(self, "bwd", _parts(self.bwd, "bwd", C, B))
        if self.mode == "stash":
            for c, (p, q) in enumerate(zip(self.fwd, self.bwd)):
                if p != q:
                    raise ChunkPlanError(
                        f"chunk plan field 'bwd[{c}]': stash mode needs the backward partition "
                        f"to equal the forward one, got {list(q)} for {list(p)}; use mode "
                        "'recompute' for free backward partitions")
        if self.wgt is not None and not self.split:
            raise ChunkPlanError("chunk plan field 'wgt': a weight-gradient partition needs "
                                 "'split': true (a schedule with I and W)")
        if self.split:
            wgt = self.bwd if self.wgt is None else _parts(self.wgt, "wgt", C, B)
            for c, (r, q) in enumerate(zip(wgt, self.bwd)):
                if not is_coarsening(r, q):
                    raise ChunkPlanError(
                        f"chunk plan field 'wgt[{c}]': {list(r)} must be a coarsening of the "
                        f"backward partition {list(q)} (each W covers whole I microbatches)")
            object.__setattr__(self, "wgt", wgt)
        object.__setattr__(self, "caps", _ints(self.caps, "caps", D, 1))
        if self.w_caps is not None and not self.split:
            raise ChunkPlanError("chunk plan field 'w_caps': caps on pending weight gradients "
                                 "need 'split': true")
        object.__setattr__(self, "w_caps", _ints(self.w_caps, "w_caps", D, 0))
        for key in ("fwd_lag", "bwd_lag"):
            object.__setattr__(self, key, _ints(getattr(self, key), key, C, 0, "chunk"))
        g = self.group
        if g is not None and (isinstance(g, bool) or not isinstance(g, int) or not 1 <= g <= B):
            raise ChunkPlanError(f"chunk plan field 'group' must be a number of samples in "
                                 f"1..B = {B}, got {g!r}")

    # ------------------------------------------------------------------ derived
    @property
    def C(self) -> int:
        return len(self.layers)

    @property
    def B(self) -> int:
        return sum(self.fwd[0])

    @property
    def v(self) -> int:
        """Chunks per device."""
        return self.C // self.D

    @property
    def devices(self) -> tuple[int, ...]:
        """The device of every chunk (:func:`umpipe_bench.layout.chunk_devices`)."""
        return chunk_devices(self.layout, self.D, self.v)

    @property
    def device_chunks(self) -> tuple[tuple[int, ...], ...]:
        """The chunks of every device, ascending."""
        return device_chunks(self.layout, self.D, self.v)

    def effective_caps(self) -> tuple[int, ...]:
        """``caps`` with "no cap" written as ``v * B`` (all the samples of a device's chunks)."""
        return self.caps if self.caps is not None else (self.v * self.B,) * self.D

    def effective_w_caps(self) -> tuple[int, ...]:
        """``w_caps`` with "no cap" written as ``v * B``."""
        return self.w_caps if self.w_caps is not None else (self.v * self.B,) * self.D

    def effective_group(self) -> int:
        return self.group if self.group is not None else self.B

    def effective_lags(self) -> tuple[tuple[int, ...], tuple[int, ...]]:
        """``(fwd_lag, bwd_lag)`` with None written as zeros."""
        zero = (0,) * self.C
        return self.fwd_lag or zero, self.bwd_lag or zero

    def parts(self) -> list[tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]]:
        """Per chunk ``(P, Q, R)`` (``R = Q`` when not split), as
        :func:`umpipe_bench.devsim.simulate_devices` takes them."""
        wgt = self.wgt if self.wgt is not None else self.bwd
        return [(p, q, r) for p, q, r in zip(self.fwd, self.bwd, wgt)]

    def is_equal(self) -> bool:
        """Whether every chunk uses one partition in every direction (torch's case)."""
        first = self.fwd[0]
        return all(p == first for p in (*self.fwd, *self.bwd, *(self.wgt or ())))

    def describe(self) -> str:
        sizes = "equal" if self.is_equal() else "unequal"
        kind = self.layout if self.layout != "loop" else f"loop(v={self.v})"
        return f"{kind} C={self.C} {sizes} {'split ' if self.split else ''}{self.mode}"

    # ------------------------------------------------------------------ constructors
    @classmethod
    def equal(cls, D: int, B: int, M: int, layout: str, layers: Sequence[int], *,
              mode: str = "stash", split: bool = False, caps: Sequence[int] | None = None,
              w_caps: Sequence[int] | None = None, group: int | None = None,
              fwd_lag: Sequence[int] | None = None, bwd_lag: Sequence[int] | None = None
              ) -> ChunkPlan:
        """EDP(M) in every chunk and direction; caps, ``w_caps``, ``group`` and lags in
        samples."""
        if not 1 <= M <= B:
            raise ChunkPlanError(f"microbatches M must be in 1..B = {B}, got {M}")
        sizes = balanced_sizes(B, M)
        C = len(layers)
        return cls(D=D, layout=layout, layers=tuple(layers), fwd=(sizes,) * C,
                   bwd=(sizes,) * C, mode=mode, split=split,
                   caps=None if caps is None else tuple(caps),
                   w_caps=None if w_caps is None else tuple(w_caps), group=group,
                   fwd_lag=None if fwd_lag is None else tuple(fwd_lag),
                   bwd_lag=None if bwd_lag is None else tuple(bwd_lag))

    def replace(self, **changes: Any) -> ChunkPlan:
        """The same plan with some fields changed (validated again)."""
        data = {f: getattr(self, f) for f in ("D", "layout", "layers", "fwd", "bwd", "mode",
                                              "split", "wgt", "caps", "w_caps", "group",
                                              "fwd_lag", "bwd_lag")}
        data["meta"] = dict(self.meta)
        data.update(changes)
        if not data["split"]:
            data["wgt"] = data["w_caps"] = None
        return ChunkPlan(**data)

    # ------------------------------------------------------------------ problems
    def validate(self, problem: Problem) -> ChunkPlan:
        """Check the plan against a per-layer problem: its layers and ``B``."""
        if sum(self.layers) != problem.S:
            raise ChunkPlanError(f"chunk plan field 'layers' {list(self.layers)} covers "
                                 f"{sum(self.layers)} layers; problem {problem.name!r} has "
                                 f"{problem.S}")
        if self.B != problem.B:
            raise ChunkPlanError(f"chunk plan partitions sum to B = {self.B}; problem "
                                 f"{problem.name!r} has B = {problem.B}")
        if self.split and not problem.has_split_backward:
            raise ChunkPlanError(f"chunk plan has 'split': true but problem {problem.name!r} "
                                 "has no split-backward costs (ibwd, ribwd, wbwd)")
        return self

    # ------------------------------------------------------------------ files
    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "schema": CHUNK_PLAN_SCHEMA, "B": self.B, "D": self.D, "layout": self.layout,
            "layers": list(self.layers), "mode": self.mode, "split": self.split,
            "fwd": [list(p) for p in self.fwd], "bwd": [list(q) for q in self.bwd],
        }
        if self.split and self.wgt != self.bwd:
            out["wgt"] = [list(r) for r in self.wgt or ()]
        for key in ("caps", "w_caps", "fwd_lag", "bwd_lag"):
            if getattr(self, key) is not None:
                out[key] = list(getattr(self, key))
        if self.group is not None:
            out["group"] = self.group
        out["meta"] = dict(self.meta)
        return out

    @classmethod
    def from_dict(cls, data: Any, where: str = "chunk plan") -> ChunkPlan:
        """A plan from its JSON form (:data:`SPEC`); errors name ``where`` and the field."""
        sc.check(data, SPEC, where, ChunkPlanError)
        try:
            plan = cls(D=data["D"], layout=data["layout"], layers=data["layers"],
                       fwd=data["fwd"], bwd=data["bwd"], mode=data["mode"],
                       split=data.get("split", False), wgt=data.get("wgt"),
                       caps=data.get("caps"), w_caps=data.get("w_caps"),
                       group=data.get("group"), fwd_lag=data.get("fwd_lag"),
                       bwd_lag=data.get("bwd_lag"), meta=dict(data.get("meta") or {}))
        except ChunkPlanError as exc:
            raise ChunkPlanError(f"{where}: {exc}") from None
        if "B" in data and data["B"] != plan.B:
            raise ChunkPlanError(f"{where}: field 'B' = {data['B']} but the partitions sum to "
                                 f"{plan.B}")
        return plan

    def save(self, path: str | os.PathLike[str]) -> None:
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> ChunkPlan:
        where = f"chunk plan file {str(path)!r}"
        return cls.from_dict(sc.load_json(path, where, ChunkPlanError), where)


_SIZES = sc.List(sc.List(sc.Int(lo=1, what="an integer microbatch size"), min_len=1),
                 min_len=1)
_DEV = sc.List(sc.Int(lo=0, what="an integer number of samples"), min_len=1, nullable=True)
#: The chunk plan file's schema; relations (sums, coarsening, layout sizes) are ChunkPlan's.
SPEC = sc.Obj((
    sc.Field("schema", sc.Str(choices=(CHUNK_PLAN_SCHEMA,)), required=True),
    sc.Field("B", sc.Int(*LIMITS["B"])),
    sc.Field("D", sc.Int(*LIMITS["S"]), required=True),
    sc.Field("layout", sc.Str(choices=LAYOUT_KINDS), required=True),
    sc.Field("layers", sc.List(sc.Int(lo=1, what="a layer count"), min_len=1), required=True),
    sc.Field("mode", sc.Str(choices=MODES), required=True),
    sc.Field("split", sc.Bool()),
    sc.Field("fwd", _SIZES, required=True),
    sc.Field("bwd", _SIZES, required=True),
    sc.Field("wgt", sc.List(_SIZES.item, min_len=1, nullable=True)),
    sc.Field("caps", _DEV),
    sc.Field("w_caps", _DEV),
    sc.Field("group", sc.Int(lo=1, nullable=True, what="a number of samples")),
    sc.Field("fwd_lag", _DEV),
    sc.Field("bwd_lag", _DEV),
    sc.Field("meta", sc.Map()),
), what="a chunk plan object")
