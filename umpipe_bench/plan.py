"""Plans: per-stage forward and backward compositions of the mini-batch (docs/MODEL.md §2).

A plan gives every stage ``s`` a forward partition ``P[s]`` and a backward partition ``Q[s]``
of ``B`` (ordered positive sizes summing to ``B``) and a memory mode: ``stash`` (``Q == P``) or
``recompute`` (``Q`` free). Plans round-trip exactly through the cut-bit encoding of
:mod:`.codec` (bit ``i`` set means a microbatch boundary after sample ``i+1``) and through JSON
plan files.

This module imports no torch.
"""

from __future__ import annotations

import json
import numbers
import os
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from . import schema as sc
from .codec import balanced_sizes, bits_to_partitions, bits_to_sizes, genes_to_caps, sizes_to_bits
from .errors import InputError
from .problem import LIMITS, atomic_write_text

if TYPE_CHECKING:
    from .problem import Problem

__all__ = [
    "MODES",
    "PLAN_SCHEMA",
    "SCHEDULE_NAMES",
    "SPEC",
    "Plan",
    "PlanError",
    "balanced_split",
    "bits_to_sizes",
    "parse_plan_spec",
    "sizes_to_bits",
]

MODES = ("stash", "recompute")
PLAN_SCHEMA = "umpipe-plan/1"
#: The schedules a plan file may name in ``meta.schedule`` (those of
#: :data:`umpipe_bench.schedules.SCHEDULES`, docs/SCHEDULES.md §1)
SCHEDULE_NAMES = ("gpipe", "1f1b", "capped")


#: a plan that does not fit its problem or is malformed; the message names stage and field
PlanError = InputError


def balanced_split(B: int, M: int) -> tuple[int, ...]:
    """EDP sizes: ``B`` split into ``M`` parts differing by at most one, larger first
    (the sizes ``torch.tensor_split`` produces; :func:`.codec.balanced_sizes`)."""
    try:
        return balanced_sizes(B, M)
    except ValueError as exc:
        raise PlanError(str(exc)) from None


def _check_caps(caps: Any, S: int) -> tuple[int, ...]:
    """Caps must be ``S`` whole numbers >= 1 (samples a stage may hold in flight)."""
    if isinstance(caps, (str, bytes)) or not isinstance(caps, Sequence):
        raise PlanError(f"plan field 'caps' must be a list of {S} whole numbers, got {caps!r}")
    if len(caps) != S:
        raise PlanError(f"plan field 'caps' has {len(caps)} entries; expected one per stage "
                        f"(S = {S})")
    out = []
    for s, k in enumerate(caps):
        if isinstance(k, bool) or not isinstance(k, (int, np.integer)) or k < 1:
            raise PlanError(f"stage {s} cap {k!r} must be a whole number of samples >= 1")
        out.append(int(k))
    return tuple(out)


def _sizes(parts: Any, direction: str) -> tuple[tuple[int, ...], ...]:
    """Partitions as tuples of ints; a size that is not an integer (``16.5``, ``"16"``,
    ``true``) is refused, never rounded (docs/MODEL.md §2: sizes are positive integers)."""
    out = []
    for s, p in enumerate(parts):
        row = []
        for j, x in enumerate(p):
            if isinstance(x, bool) or not isinstance(x, numbers.Integral):
                raise PlanError(f"stage {s} {direction} microbatch {j}: size {x!r} is not an "
                                "integer")
            row.append(int(x))
        out.append(tuple(row))
    return tuple(out)


def _common_sum(*groups: Sequence[Sequence[int]]) -> int:
    """The mini-batch size the partitions agree on: the sum most of them have (ties: the
    first stage's forward sum), so an error names the stage that sums wrong."""
    sums = [sum(p) for parts in groups for p in parts]
    counts = Counter(sums)
    top = max(counts.values())
    return next(x for x in sums if counts[x] == top)


def _check_recorded_B(data: dict[str, Any], where: str) -> None:
    """A plan file records ``B``: name the first stage whose partition sums otherwise."""
    B = data.get("B")
    if isinstance(B, bool) or not isinstance(B, int):
        return
    for direction in ("fwd", "bwd"):
        parts = data[direction]
        if not isinstance(parts, list):
            return
        for s, p in enumerate(parts):
            if isinstance(p, list) and all(
                isinstance(x, int) and not isinstance(x, bool) for x in p
            ) and sum(p) != B:
                raise PlanError(f"{where}: stage {s} {direction} partition {p} sums to "
                                f"{sum(p)}; the file's B is {B}")


@dataclass(frozen=True)
class Plan:
    """Per-stage forward and backward compositions and a memory mode (docs/MODEL.md §2)."""

    fwd: tuple[tuple[int, ...], ...]
    bwd: tuple[tuple[int, ...], ...]
    mode: str = "stash"
    meta: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)
    #: Per-stage in-flight caps ``K[s]`` in samples (docs/SCHEDULES.md); None: no cap (GPipe).
    caps: tuple[int, ...] | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "fwd", _sizes(self.fwd, "fwd"))
        object.__setattr__(self, "bwd", _sizes(self.bwd, "bwd"))
        if self.caps is not None:
            object.__setattr__(self, "caps", _check_caps(self.caps, len(self.fwd)))
        self._check_shape()

    # ----------------------------------------------------------------- constructors
    @classmethod
    def edp(cls, S: int, B: int, M: int, mode: str = "stash") -> Plan:
        """EDP(M): every stage, both directions, the balanced split of ``B`` into ``M``."""
        sizes = balanced_split(B, M)
        return cls(fwd=(sizes,) * S, bwd=(sizes,) * S, mode=mode)

    @classmethod
    def from_bits(
        cls, fwd_bits: Sequence[Sequence[int]], bwd_bits: Sequence[Sequence[int]] | None,
        mode: str = "stash", caps: Sequence[int] | None = None,
    ) -> Plan:
        """Decode cut bits ``[S, B-1]`` (:mod:`.codec`); in stash mode ``bwd_bits`` is not read
        (tied to forward) and may be None. ``caps``: cap genes, None or all ``>= B`` for no cap
        (:func:`.codec.genes_to_caps`)."""
        fwd = bits_to_partitions(fwd_bits)
        bwd = fwd if (bwd_bits is None or mode == "stash") else bits_to_partitions(bwd_bits)
        B = sum(fwd[0]) if fwd else 0
        return cls(fwd=fwd, bwd=bwd, mode=mode, caps=genes_to_caps(caps, B))

    def to_bits(self) -> tuple[list[list[int]], list[list[int]]]:
        """Encode as (forward bits, backward bits), ``S`` lists of ``B-1`` ints each."""
        return (
            [sizes_to_bits(p, self.B) for p in self.fwd],
            [sizes_to_bits(q, self.B) for q in self.bwd],
        )

    # ----------------------------------------------------------------- properties
    @property
    def S(self) -> int:
        return len(self.fwd)

    @property
    def B(self) -> int:
        return sum(self.fwd[0])

    def is_edp(self) -> bool:
        """True when every stage uses one balanced split in both directions."""
        first = self.fwd[0]
        return (
            first == balanced_split(self.B, len(first))
            and all(p == first for p in self.fwd)
            and all(q == first for q in self.bwd)
        )

    def describe(self) -> str:
        """``EDP(M)`` or ``UEDP``, with the caps; more than :data:`DESCRIBE_CAPS` stages
        give the caps shortened (runs of one value as ``value xN``, then the first and last
        few)."""
        name = f"EDP({len(self.fwd[0])})" if self.is_edp() else "UEDP"
        if self.caps is None:
            return name
        if len(self.caps) <= DESCRIBE_CAPS:
            return f"{name} caps={list(self.caps)}"
        return f"{name} caps=[{_short_list(self.caps)}]"

    def effective_caps(self) -> tuple[int, ...]:
        """``K[s]`` with "no cap" written as ``B`` (every cap >= B gives the GPipe lists)."""
        return self.caps if self.caps is not None else (self.B,) * self.S

    def with_caps(self, caps: Sequence[int] | None) -> Plan:
        """The same partitions and mode with other in-flight caps (None: uncapped)."""
        return Plan(fwd=self.fwd, bwd=self.bwd, mode=self.mode, meta=dict(self.meta),
                    caps=None if caps is None else tuple(caps))

    # ----------------------------------------------------------------- validation
    def _check_shape(self) -> None:
        if self.mode not in MODES:
            raise PlanError(f"plan field 'mode' must be one of {MODES}, got {self.mode!r}")
        if not self.fwd:
            raise PlanError("plan has no stages (field 'fwd' is empty)")
        if len(self.bwd) != len(self.fwd):
            raise PlanError(
                f"plan has {len(self.fwd)} forward partitions but {len(self.bwd)} backward ones"
            )
        B = _common_sum(self.fwd, self.bwd)
        for direction, parts in (("fwd", self.fwd), ("bwd", self.bwd)):
            for s, p in enumerate(parts):
                if not p:
                    raise PlanError(f"stage {s} {direction} partition is empty")
                for j, x in enumerate(p):
                    if x <= 0:
                        raise PlanError(
                            f"stage {s} {direction} microbatch {j} has size {x}; sizes must be "
                            "positive"
                        )
                if sum(p) != B:
                    raise PlanError(
                        f"stage {s} {direction} partition {list(p)} sums to {sum(p)}; expected "
                        f"B = {B} (the sum of most partitions)"
                    )
        if self.mode == "stash":
            for s, (p, q) in enumerate(zip(self.fwd, self.bwd)):
                if p != q:
                    raise PlanError(
                        f"stage {s}: stash mode needs the backward partition to equal the "
                        f"forward one (Q == P), got P={list(p)} Q={list(q)}; use mode "
                        "'recompute' for free backward partitions"
                    )

    def validate(self, problem: Problem) -> Plan:
        """Check that the plan fits ``problem`` (stage count and ``B``)."""
        if self.S != problem.S:
            raise PlanError(
                f"plan has {self.S} stages but problem {problem.name!r} has S = {problem.S}"
            )
        if self.B != problem.B:
            raise PlanError(
                f"plan partitions sum to {self.B} but problem {problem.name!r} has B = "
                f"{problem.B}"
            )
        return self

    # ----------------------------------------------------------------- files
    def to_dict(self) -> dict[str, Any]:
        return {
            "schema": PLAN_SCHEMA,
            "S": self.S,
            "B": self.B,
            "mode": self.mode,
            "fwd": [list(p) for p in self.fwd],
            "bwd": [list(q) for q in self.bwd],
            **({} if self.caps is None else {"caps": list(self.caps)}),
            "meta": dict(self.meta),
        }

    @classmethod
    def from_dict(cls, data: dict[str, Any], where: str = "plan") -> Plan:
        """Build a plan from its JSON form, checked against :data:`SPEC`; errors name
        ``where`` and the field."""
        if not isinstance(data, dict):
            raise PlanError(f"{where}: expected a JSON object, got {sc.describe(data)}")
        if data.get("schema") != PLAN_SCHEMA:
            raise PlanError(
                f"{where}: unknown schema {data.get('schema')!r}; expected {PLAN_SCHEMA!r}"
            )
        sc.check(data, SPEC, where, PlanError)
        _check_recorded_B(data, where)
        meta = dict(data.get("meta") or {})
        if "schedule" in meta:
            meta["schedule"] = meta["schedule"].lower()
        try:
            plan = cls(fwd=data["fwd"], bwd=data["bwd"], mode=data["mode"], meta=meta,
                       caps=data.get("caps"))
        except PlanError as exc:
            raise PlanError(f"{where}: {exc}") from exc
        for key, val in (("S", plan.S), ("B", plan.B)):
            if key in data and data[key] != val:
                raise PlanError(
                    f"{where}: field {key!r} = {data[key]} but the partitions give {val}"
                )
        return plan

    def save(self, path: str | os.PathLike[str]) -> None:
        atomic_write_text(path, json.dumps(self.to_dict(), indent=1) + "\n")

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Plan:
        where = f"plan file {str(path)!r}"
        return cls.from_dict(sc.load_json(path, where, PlanError), where)

    def check_problem(self, problem: Problem, where: str = "plan", force: bool = False,
                      warn: Callable[[str], None] | None = None) -> Plan:
        """Refuse a plan made for another problem than ``problem``.

        A plan records the problem it was made for (``meta.problem``, its name, and
        ``meta.problem_digest``, :meth:`Problem.digest` without memory capacities). A plan
        whose digest differs from ``problem``'s was made for another problem, or another
        version of it (other costs), even when the shapes agree: it raises :class:`PlanError`
        naming both, unless ``force``, which only warns. A plan file with a name but no digest
        (an older format) warns when the name differs; one that records neither is taken as
        is.
        Then the shapes must agree (:meth:`validate`).
        """
        name = self.meta.get("problem")
        digest = self.meta.get("problem_digest")
        made_for = f"problem {name!r}" if name else "another problem"
        msg = None
        own = problem.digest(capacities=False)
        if digest is not None and digest != own:
            same = f"another version of {made_for}" if name == problem.name else made_for
            msg = (f"{where} was made for {same} (digest {digest}), not for problem "
                   f"{problem.name!r} (digest {own})")
            if not force:
                raise PlanError(f"{msg}; pass --force-plan to use it anyway")
        elif digest is None and name and str(name) != problem.name:
            msg = f"{where} was made for {made_for}, not for problem {problem.name!r}"
        if msg is not None:
            (warn or _warn)(msg)
        return self.validate(problem)


#: :meth:`Plan.describe` lists every cap up to this many stages, and shortens longer lists.
DESCRIBE_CAPS = 16


def _short_list(values: Sequence[int], keep: int = 4) -> str:
    """``2048 x113, 1920, 1792, ... (8 more), 256, 128``: runs of one value as ``v xN``, then
    the first and last ``keep`` items when there are more than ``2 * keep + 1``."""
    runs: list[str] = []
    i = 0
    while i < len(values):
        j = i
        while j + 1 < len(values) and values[j + 1] == values[i]:
            j += 1
        runs.append(f"{values[i]} x{j - i + 1}" if j > i else str(values[i]))
        i = j + 1
    if len(runs) > 2 * keep + 1:
        runs = [*runs[:keep], f"... ({len(runs) - 2 * keep} more)", *runs[-keep:]]
    return ", ".join(runs)


def _warn(msg: str) -> None:
    print(f"warning: {msg}", file=sys.stderr)


_PARTS = sc.List(sc.List(sc.Int(lo=1, what="an integer microbatch size"), min_len=1),
                 min_len=LIMITS["S"][0], max_len=LIMITS["S"][1])
_META = sc.Obj((
    sc.Field("schedule", sc.Str(choices=SCHEDULE_NAMES, fold=True)),
    sc.Field("planner", sc.Str()),
    sc.Field("predicted_time", sc.Num(finite=False, nullable=True, what="a number")),
    sc.Field("problem", sc.Str()),
    sc.Field("problem_digest", sc.Str(nonempty=True)),
    sc.Field("seed", sc.Int(*sc.SEED_RANGE, nullable=True)),
    # the signal that ended the run (the plan is the best found until then)
    sc.Field("interrupted", sc.Str(choices=("SIGINT", "SIGTERM", "SIGHUP"))),
), open=True, what="an object of metadata")
#: The plan file's schema (docs/MODEL.md §2). ``meta`` may hold other keys (free-form notes);
#: the listed ones are typed. Relations (sums, ``Q == P`` in stash mode) are :class:`Plan`'s.
SPEC = sc.Obj((
    sc.Field("schema", sc.Str(choices=(PLAN_SCHEMA,)), required=True),
    sc.Field("S", sc.Int(*LIMITS["S"])),
    sc.Field("B", sc.Int(*LIMITS["B"])),
    sc.Field("mode", sc.Str(choices=MODES), required=True),
    sc.Field("fwd", _PARTS, required=True),
    sc.Field("bwd", _PARTS, required=True),
    sc.Field("caps", sc.List(sc.Int(lo=1, what="an integer number of samples"), nullable=True)),
    sc.Field("meta", _META),
), what="a plan object")


def parse_plan_spec(spec: str, problem: Problem, mode: str | None = None,
                    force: bool = False) -> tuple[Plan, str]:
    """Parse ``gpipe:M``, ``1f1b:M`` or a plan file path into ``(plan, schedule name)``.

    ``mode`` overrides the memory mode (for ``gpipe:M``/``1f1b:M`` it defaults to ``stash``;
    a plan file keeps its own mode unless ``mode`` is given, and then they must agree). A plan
    file made for another problem is refused unless ``force`` (:meth:`Plan.check_problem`).
    """
    head, sep, tail = spec.partition(":")
    if sep and head.lower() in ("gpipe", "1f1b"):
        try:
            M = int(tail)
        except ValueError:
            raise PlanError(f"plan spec {spec!r}: M must be an integer, as in 'gpipe:4'") from None
        if not 1 <= M <= problem.B:
            raise PlanError(f"plan spec {spec!r}: M must be in 1..B={problem.B}")
        return Plan.edp(problem.S, problem.B, M, mode or "stash"), head.lower()
    path = Path(spec)
    if not path.exists():
        raise PlanError(
            f"plan spec {spec!r} is neither 'gpipe:M', '1f1b:M' nor an existing plan file"
        )
    plan = Plan.load(path)
    plan.check_problem(problem, f"plan file {spec!r}", force=force)
    if mode is not None and mode != plan.mode:
        plan = Plan(fwd=plan.fwd, bwd=plan.bwd, mode=mode, meta=plan.meta, caps=plan.caps)
    schedule = str(plan.meta.get("schedule", "gpipe" if plan.caps is None else "capped"))
    return plan, schedule
