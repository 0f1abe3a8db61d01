"""Best known values: the best iteration time anyone has found, per problem, mode and family.

``umpipe_bench/problems/best_known.json`` holds one entry per (registered problem, memory mode,
schedule family) with the value (seconds, docs/MODEL.md §4), the plan file that achieves it (kept
beside it in ``umpipe_bench/problems/best_known/``), the planner that found it, the date and the
problem's digest. Regret and COCO-style targets (:mod:`.anytime`) are measured against it, as
pymoo's problems know their optimum.

Schedule families (docs/SCHEDULES.md §1): ``gpipe`` accepts plans run under the GPipe
schedule only (cut bits, no caps); ``capped`` is the whole family from GPipe to 1F1B (plans
under ``gpipe``, ``capped`` and torch's ``1f1b``), so its value is never above ``gpipe``'s.
Values are for the problem as registered, without a ``--memory-cap`` (a problem's own device
capacity, where it has one, is respected).

Only :func:`update` writes the file, and only after it has re-simulated the candidate plan
(:func:`umpipe_bench.simulator.simulate`) and reproduced the value it claims to within
``rel 1e-9`` on the current version of the problem (same digest); anything else is refused
with the reason. :func:`check` re-simulates every entry.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from importlib.util import find_spec
from pathlib import Path
from typing import Any

from .. import schema as sc
from ..errors import InputError
from ..filelock import sidecar_lock
from ..plan import MODES, SCHEDULE_NAMES
from ..problem import Problem, atomic_write_text

__all__ = ["FAMILIES", "SCHEMA", "SPEC", "BestKnown", "BestKnownError", "Candidate", "Entry",
           "candidates_from_leaderboard", "check", "default_path", "update"]

SCHEMA = "umpipe-best-known/1"

#: Family -> the schedules whose plans belong to it (docs/SCHEDULES.md §1).
FAMILIES: dict[str, tuple[str, ...]] = {"gpipe": ("gpipe",),
                                        "capped": ("gpipe", "1f1b", "capped")}

#: How closely a re-simulation must reproduce a claimed value.
REL_TOL = 1e-9


#: a best-known file that cannot be read, or an entry that does not reproduce
BestKnownError = InputError


def default_path() -> Path:
    """``best_known.json`` of the installed ``umpipe_bench.problems`` package."""
    spec = find_spec("umpipe_bench.problems")
    if spec is None or spec.origin is None:
        raise BestKnownError("the 'umpipe_bench.problems' package is not installed; pass --file")
    return Path(spec.origin).parent / "best_known.json"


def _file(path: str | os.PathLike[str] | None) -> Path:
    """The best-known file ``path`` names (None: :func:`default_path`)."""
    return Path(path) if path is not None else default_path()


@dataclass(frozen=True)
class Entry:
    """One best known value; ``plan_file`` is relative to the JSON file's folder."""

    problem: str
    mode: str
    family: str
    value: float
    plan_file: str
    planner: str
    schedule: str
    date: str
    problem_digest: str
    #: a proven lower bound on T of every plan of the family (seconds; docs/CERTIFY.md)
    bound: float | None = None
    #: what proved ``bound`` (e.g. ``cpsat order=any 60s``, ``relaxation``)
    bound_by: str = ""
    #: ``value`` is within :data:`umpipe_bench.certify.solve.OPT_TOL` of ``bound``
    optimal: bool = False

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.problem, self.mode, self.family)

    @property
    def gap(self) -> float | None:
        """``value / bound - 1`` (None without a bound)."""
        return None if not self.bound else self.value / self.bound - 1.0


@dataclass(frozen=True)
class Candidate:
    """A plan offered for the file: it must reproduce ``claimed`` on ``problem``."""

    problem: str
    mode: str
    plan_path: Path
    claimed: float
    planner: str
    date: str
    problem_digest: str | None = None  # of the problem the plan was found on


class BestKnown:
    """The entries of one best-known file (missing file: no entries)."""

    def __init__(self, path: str | os.PathLike[str] | None = None) -> None:
        self.path = _file(path)
        self.entries: dict[tuple[str, str, str], Entry] = {}
        if self.path.exists() and not self.path.is_file():  # a FIFO would block the read
            raise BestKnownError(f"{str(self.path)!r}: not a regular file; expected a best-known "
                                 "file (JSON)")
        if self.path.exists():
            where = f"best-known file {str(self.path)!r}"
            data = sc.load_json(self.path, where, BestKnownError)
            if not isinstance(data, dict) or data.get("schema") != SCHEMA:
                found = data.get("schema") if isinstance(data, dict) else sc.describe(data)
                raise BestKnownError(f"{where}: not a best-known file (schema {found!r}; "
                                     f"expected {SCHEMA!r})")
            sc.check(data, SPEC, where, BestKnownError)
            for i, e in enumerate(data["entries"]):
                entry = Entry(**e)
                if entry.key in self.entries:
                    raise BestKnownError(f"{where}: field 'entries[{i}]': problem "
                                         f"{entry.problem!r}, mode {entry.mode!r}, family "
                                         f"{entry.family!r} has an entry already; expected "
                                         "one entry per (problem, mode, family)")
                self.entries[entry.key] = entry

    def value(self, problem: str, mode: str, family: str = "capped") -> float | None:
        e = self.entries.get((problem, mode, family))
        return None if e is None else e.value

    def values(self, family: str = "capped") -> dict[tuple[str, str], float]:
        """``{(problem, mode): value}`` of one family (what :mod:`.anytime` takes)."""
        return {(p, m): e.value for (p, m, f), e in self.entries.items() if f == family}

    def save(self) -> None:
        entries = [asdict(self.entries[k]) for k in sorted(self.entries)]
        atomic_write_text(self.path, json.dumps({"schema": SCHEMA, "entries": entries},
                                                indent=1) + "\n")


def _relative_path(text: str) -> None:
    if text.startswith(("/", "\\")) or ".." in Path(text).parts:
        raise ValueError(f"expected a path relative to the file's folder, got {text!r}")


_ENTRY = sc.Obj((
    sc.Field("problem", sc.Str(nonempty=True), required=True),
    sc.Field("mode", sc.Str(choices=MODES), required=True),
    sc.Field("family", sc.Str(choices=tuple(FAMILIES)), required=True),
    sc.Field("value", sc.Num(lo=0, lo_open=True, what="a time in seconds"), required=True),
    sc.Field("plan_file", sc.Str(nonempty=True, parse=_relative_path), required=True),
    sc.Field("planner", sc.Str(), required=True),
    sc.Field("schedule", sc.Str(choices=SCHEDULE_NAMES), required=True),
    sc.Field("date", sc.Str(), required=True),
    sc.Field("problem_digest", sc.Str(nonempty=True), required=True),
    sc.Field("bound", sc.Num(lo=0, lo_open=True, nullable=True, what="a time in seconds")),
    sc.Field("bound_by", sc.Str()),
    sc.Field("optimal", sc.Bool()),
), what="an entry object")
#: The best-known file's schema (module docstring).
SPEC = sc.Obj((
    sc.Field("schema", sc.Str(choices=(SCHEMA,)), required=True),
    sc.Field("entries", sc.List(_ENTRY), required=True),
), what="a best-known object")


def _simulate(problem: Problem, plan_path: Path) -> tuple[float, str]:
    """``(T, schedule)`` of a plan file re-simulated on ``problem``, or BestKnownError."""
    from ..memory import MemoryCapError, check_fits
    from ..plan import Plan
    from ..simulator import simulate

    plan = Plan.load(plan_path)
    schedule = str(plan.meta.get("schedule", "gpipe" if plan.caps is None else "capped"))
    plan.check_problem(problem, f"plan file {str(plan_path)!r}")
    tl = simulate(problem, plan, schedule)
    try:
        check_fits(tl.peak_memory or [], tl.capacity, f"plan {str(plan_path)!r}")
    except MemoryCapError as exc:
        raise BestKnownError(str(exc)) from None
    return float(tl.iteration_time), schedule


def _digest(problem: Problem) -> str:
    from .baselines import problem_digest

    return problem_digest(problem)


@dataclass
class UpdateReport:
    """What :func:`update` did with each candidate."""

    accepted: list[Entry]
    refused: list[str]  # one line each: candidate and reason
    kept: int  # reproduced, but not better than the entry in place


def update(candidates: Iterable[Candidate], path: str | os.PathLike[str] | None = None,
           load_problem: Any = None) -> UpdateReport:
    """Re-simulate every candidate; record those that reproduce and beat (or start) an entry.

    The new plan files are written beside the JSON file, then the JSON file (atomically); the
    read, the changes and the write hold the file's lock (``<file>.lock``), so that writers in
    other processes (``certify --record`` beside a ``best-known update``) lose nothing.
    """
    if load_problem is None:
        from ..registry import get_problem as load_problem
    with sidecar_lock(_file(path)):
        return _update(candidates, path, load_problem)


def _update(candidates: Iterable[Candidate], path: str | os.PathLike[str] | None,
            load_problem: Any) -> UpdateReport:
    """:func:`update` under the file's lock."""
    from ..plan import Plan

    book = BestKnown(path)
    folder = book.path.parent
    rep = UpdateReport([], [], 0)
    problems: dict[str, Problem] = {}
    for c in candidates:
        what = f"{c.problem} {c.mode} {c.plan_path}"
        try:
            if c.problem not in problems:
                problems[c.problem] = load_problem(c.problem)
            problem = problems[c.problem]
            digest = _digest(problem)
            if c.problem_digest and c.problem_digest != digest:
                raise BestKnownError(f"found on another version of the problem (digest "
                                     f"{c.problem_digest}, now {digest})")
            T, schedule = _simulate(problem, c.plan_path)
            if not math.isclose(T, c.claimed, rel_tol=REL_TOL):
                raise BestKnownError(f"claims T = {c.claimed!r} s but re-simulates to {T!r} s")
            plan = Plan.load(c.plan_path)
            if plan.mode != c.mode:
                raise BestKnownError(f"plan mode is {plan.mode!r}, not {c.mode!r}")
        except Exception as exc:  # a candidate is refused with its reason, never recorded
            rep.refused.append(f"{what}: {exc}")
            continue
        for family, schedules in FAMILIES.items():
            if schedule not in schedules:
                continue
            old = book.entries.get((c.problem, c.mode, family))
            if old is not None and old.problem_digest == digest and old.value <= T:
                rep.kept += 1
                continue
            rel = f"best_known/{c.problem}__{c.mode}__{family}.json"
            plan.save(folder / rel)
            kept = old is not None and old.problem_digest == digest and old.bound is not None
            entry = Entry(c.problem, c.mode, family, T, rel, c.planner, schedule, c.date,
                          digest, *((old.bound, old.bound_by, _is_optimal(T, old.bound))
                                    if kept else ()))
            book.entries[entry.key] = entry
            rep.accepted.append(entry)
    if rep.accepted:
        book.save()
    return rep


def candidates_from_leaderboard(csv_path: str | os.PathLike[str]) -> list[Candidate]:
    """Every error-free, uncapped row of a leaderboard with a plan file, as a candidate."""
    from .leaderboard import read_rows

    csv_path = Path(csv_path)
    out = []
    for r in read_rows(csv_path):
        if r.get("error") or not r.get("T_pred") or not r.get("plan_file"):
            continue
        if r.get("memory_cap", "none") not in ("", "none"):
            continue
        out.append(Candidate(r["problem"], r["mode"], csv_path.parent / r["plan_file"],
                             float(r["T_pred"]), r["planner"], r.get("timestamp", "")[:10],
                             r.get("problem_digest") or None))
    return out


def _is_optimal(value: float, bound: float | None) -> bool:
    from ..certify.solve import OPT_TOL

    return bound is not None and value - bound <= OPT_TOL * value


def _check_bound(e: Entry, problem: Problem, prove: float | None,
                 plan_path: Path | None = None, siblings: tuple[Path, ...] = (),
                 workers: int = 1, progress: Any = None,
                 proofs: dict[tuple, Any] | None = None) -> None:
    """The entry's bound and optimal flag (docs/CERTIFY.md "Certified values"): at most the
    value, at least the closed-form bound, ``optimal`` exactly when they agree; with
    ``prove`` (seconds) a solver-proven bound is proven again within that time limit (a
    bound by decision solves or the last-stage split: by decision solves, or split solves, of
    that limit each, from the entry's plan at ``plan_path``; a bound over every order: from
    the best of that plan and the ``siblings``, the plans of the problem and mode's other
    entries, which it bounds too, as the run that recorded it started from the best plan);
    ``workers``: the solver's threads; ``progress``: :func:`..certify.solve.certify`'s;
    ``proofs``: solves already run by this check, by what they were asked (an order-any bound
    of both families is proven once)."""
    from ..bound import stage_bound

    if e.bound is None:
        if e.optimal:
            raise BestKnownError("marked optimal without a bound")
        return
    if e.bound > e.value * (1 + REL_TOL):
        raise BestKnownError(f"bound {e.bound!r} s exceeds the value {e.value!r} s")
    closed = stage_bound(problem, e.mode).value
    if e.bound < closed * (1 - REL_TOL):
        raise BestKnownError(f"bound {e.bound!r} s is below the closed-form bound {closed!r} s")
    if e.optimal != _is_optimal(e.value, e.bound):
        raise BestKnownError(f"optimal is {e.optimal} but value {e.value!r} s and bound "
                             f"{e.bound!r} s say {not e.optimal}")
    if prove is not None and e.bound_by.startswith(("cpsat", "two-stage dp", "end-stages dp")):
        from ..certify.solve import certify

        # the order the bound was proven over (an order-any bound bounds the gpipe family too)
        order = "gpipe" if "order=gpipe" in e.bound_by else "any"
        hints, decide, split, more = None, 0.0, 0.0, ()
        # the programs prune at the entry's value; decisions and the split start below it
        program = e.bound_by.startswith(("two-stage dp", "end-stages dp"))
        decided = " decide" in e.bound_by
        splits = e.bound_by.endswith(" split")
        if plan_path is not None and (program or decided or splits):
            from ..plan import Plan

            more = siblings if order == "any" else ()
            hints = [Plan.load(f) for f in (plan_path, *more)]
            decide = prove if decided else 0.0
            split = prove if splits else 0.0
        key = (e.problem, e.mode, order, decide, split,
               tuple(sorted(map(str, (plan_path, *more)))) if hints is not None else None)
        c = None if proofs is None else proofs.get(key)
        if c is None:
            c = certify(problem, e.mode, order=order, time_limit=prove, hints=hints,
                        decide=decide, split=split, workers=workers, progress=progress)
            if proofs is not None:
                proofs[key] = c
        if c.bound < e.bound * (1 - REL_TOL):
            raise BestKnownError(f"the solver proves {c.bound!r} s in {prove:g} s, below the "
                                 f"recorded bound {e.bound!r} s")


def check(path: str | os.PathLike[str] | None = None, load_problem: Any = None,
          prove: float | None = None, problems: Any = None, workers: int = 1,
          progress: Any = None) -> list[str]:
    """Re-simulate every entry (of ``problems`` only, when given) and check its bound
    (:func:`_check_bound`; ``prove``: seconds per solver-proven bound to prove it again, on
    ``workers`` threads; ``progress``: called with a line per step of a long proof); one line
    per entry that fails (empty: none)."""
    if load_problem is None:
        from ..registry import get_problem as load_problem
    book = BestKnown(path)
    bad = []
    proofs: dict[tuple, Any] = {}
    for e in book.entries.values():
        if problems is not None and e.problem not in problems:
            continue
        try:
            problem = load_problem(e.problem)
            if _digest(problem) != e.problem_digest:
                raise BestKnownError("the problem changed since (digest "
                                     f"{e.problem_digest}, now {_digest(problem)})")
            T, _ = _simulate(problem, book.path.parent / e.plan_file)
            if not math.isclose(T, e.value, rel_tol=REL_TOL):
                raise BestKnownError(f"re-simulates to {T!r} s, not {e.value!r} s")
            siblings = tuple(book.path.parent / o.plan_file for o in book.entries.values()
                             if (o.problem, o.mode) == (e.problem, e.mode) and o is not e)
            say = None if progress is None else (
                lambda line, e=e: progress(f"{e.problem} {e.mode} {e.family}: {line}"))
            _check_bound(e, problem, prove, book.path.parent / e.plan_file, siblings,
                         workers, say, proofs)
        except Exception as exc:
            bad.append(f"{e.problem} {e.mode} {e.family}: {exc}")
    return bad


def record_bound(key: tuple[str, str, str], bound: float, bound_by: str,
                 path: str | os.PathLike[str] | None = None) -> Entry:
    """Store a proven ``bound`` for an entry (kept only when above the one in place); the
    read, the change and the write under the file's lock, as :func:`update`'s."""
    with sidecar_lock(_file(path)):
        return _record_bound(key, bound, bound_by, path)


def _record_bound(key: tuple[str, str, str], bound: float, bound_by: str,
                  path: str | os.PathLike[str] | None) -> Entry:
    from dataclasses import replace

    book = BestKnown(path)
    e = book.entries.get(key)
    if e is None:
        raise BestKnownError(f"no entry for problem {key[0]!r}, mode {key[1]!r}, family "
                             f"{key[2]!r}")
    if bound > e.value * (1 + REL_TOL):
        raise BestKnownError(f"bound {bound!r} s exceeds the value {e.value!r} s of {key}")
    if e.bound is None or bound > e.bound:
        bound = min(bound, e.value)
        e = replace(e, bound=bound, bound_by=bound_by, optimal=_is_optimal(e.value, bound))
        book.entries[key] = e
        book.save()
    return e


def missing(path: str | os.PathLike[str] | None = None,
            names: Iterable[str] | None = None) -> list[tuple[str, str, str]]:
    """The (problem, mode, family) keys of registered problems without an entry."""
    from ..registry import problem_names

    book = BestKnown(path)
    return [(p, m, f) for p in (names if names is not None else problem_names())
            for m in MODES for f in FAMILIES if (p, m, f) not in book.entries]


def proven_bound(problem: str, mode: str, path: str | os.PathLike[str] | None = None
                 ) -> float | None:
    """The best proven lower bound on T of every plan of ``problem`` in ``mode``: the larger
    of :func:`umpipe_bench.bound.named_lower_bound` and the bound recorded with the capped
    family's entry (an any-order bound, docs/CERTIFY.md); None when the name does not load."""
    from ..bound import named_lower_bound

    lb = named_lower_bound(problem, mode)
    try:
        e = BestKnown(path).entries.get((problem, mode, "capped"))
    except BestKnownError:
        e = None
    if e is not None and e.bound is not None and lb is not None:
        lb = max(lb, e.bound)
    return lb


def value_of(problem: str, mode: str, path: str | os.PathLike[str] | None = None
             ) -> float | None:
    """The best known value of the capped family (None: no entry or no file)."""
    try:
        return BestKnown(path).value(problem, mode, "capped")
    except BestKnownError:
        return None


#: A gap to the proven bound at most this marks a value certified (docs/CERTIFY.md).
CERTIFIED_GAP = 0.01


def as_mapping(path: str | os.PathLike[str] | None = None, family: str = "capped"
               ) -> Mapping[tuple[str, str], float]:
    """``{(problem, mode): value}``; empty when the file does not exist."""
    return BestKnown(path).values(family)
