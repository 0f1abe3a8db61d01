"""Benchmark matrices: TOML files that list problems x planners x seeds x modes with budgets.

A matrix file has one ``[bench]`` table of defaults and one ``[[planners]]`` table per planner
variant; a planner may narrow or override any of the defaults (its own seeds, modes, budgets
or problems). Validation is :mod:`umpipe_bench.schema`'s (:data:`SPEC`); every error names the
file and the field, e.g. ``planners[1].settings``, and what was expected. A matrix lists each
cell once: a value given twice in one list (``seeds = [0, 0]``) or a planner entry that repeats
another one's cells under another label is refused, naming the duplicate, rather than
silently dropped: a duplicate is nearly always a typo (``[0, 0]`` for ``[0, 1]``), and
dropping it would hide the cells that were meant. Expanding a matrix gives :class:`Cell`
objects, ordered problem by problem, whose :meth:`Cell.key` is what a resumed run uses to skip
finished work.

Example::

    [bench]
    name = "smoke"
    problems = ["sim-s4-b16-s0", "sim-s8-*"]   # names or shell-style patterns
    optional_problems = ["gpt1-14"]            # included only when registered
    seeds = [0, 1]
    modes = ["stash", "recompute"]
    budgets = ["evals:2000"]

    [[planners]]
    name = "gpipe"        # registry name, or "module:Class" for an unregistered planner
    seeds = [0]           # deterministic: one seed is enough

    [[planners]]
    name = "tidgap"
    label = "tidgap-p64"  # the name rows carry (default: name)
    settings = { population = 64 }
"""

from __future__ import annotations

import fnmatch
import hashlib
import importlib
import json
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from .. import schema as sc
from ..errors import InputError
from ..plan import MODES
from ..planners.search.base import Budget, PlannerError
from .memcap import NO_CAP, check_memory_cap

__all__ = [
    "SPEC",
    "BenchConfig",
    "BenchSection",
    "Cell",
    "ConfigError",
    "PlannerEntry",
    "builtin_config",
    "load_config",
    "parse_config",
    "planner_class",
    "planner_inputs",
    "settings_hash",
]


#: a malformed matrix file; the message names the file and the field
ConfigError = InputError


def _check_budget(v: str) -> str:
    try:
        return str(Budget.parse(v))
    except PlannerError as exc:
        raise ValueError(str(exc)) from None


def _list(item: sc.Spec, unique: bool = True) -> sc.List:
    return sc.List(item, min_len=1, unique=unique)


_SEEDS = _list(sc.Int(*sc.SEED_RANGE, what="a seed (an integer)"))
_MODES = _list(sc.Str(choices=MODES))
_BUDGETS = _list(sc.Str(parse=_check_budget))
_CAPS = _list(sc.Str(parse=check_memory_cap))
_PATTERNS = sc.List(sc.Str(nonempty=True))
#: The ``[bench]`` table: the matrix's name and its defaults. Lists hold each value once
#: (``seeds = [0, 0]`` would run every cell twice).
BENCH_SPEC = sc.Obj((
    sc.Field("name", sc.Str()),
    sc.Field("description", sc.Str()),
    sc.Field("problems", _PATTERNS),
    sc.Field("optional_problems", _PATTERNS),
    sc.Field("seeds", _SEEDS),
    sc.Field("modes", _MODES),
    sc.Field("budgets", _BUDGETS),
    sc.Field("memory_caps", _CAPS),
), what="a table")
#: One ``[[planners]]`` table; unset fields take the ``[bench]`` defaults.
PLANNER_SPEC = sc.Obj((
    sc.Field("name", sc.Str(nonempty=True), required=True),
    sc.Field("label", sc.Str(nonempty=True, nullable=True)),
    sc.Field("settings", sc.Map()),
    sc.Field("seeds", _SEEDS),
    sc.Field("modes", _MODES),
    sc.Field("budgets", _BUDGETS),
    sc.Field("problems", sc.List(sc.Str(nonempty=True), min_len=1)),
    sc.Field("memory_caps", _CAPS),
), what="a table")
#: The schema of a whole matrix file.
SPEC = sc.Obj((
    sc.Field("bench", BENCH_SPEC, required=True),
    sc.Field("planners", sc.List(PLANNER_SPEC, min_len=1), required=True),
), what="a matrix (a [bench] table and [[planners]] tables)")


@dataclass(frozen=True)
class PlannerEntry:
    """One planner variant of the matrix; unset fields (None) take the ``[bench]`` defaults."""

    name: str
    label: str | None = None
    settings: dict[str, Any] = field(default_factory=dict)
    seeds: list[int] | None = None
    modes: list[str] | None = None
    budgets: list[str] | None = None
    problems: list[str] | None = None
    memory_caps: list[str] | None = None

    @property
    def display(self) -> str:
        return self.label or self.name


@dataclass(frozen=True)
class BenchSection:
    """The ``[bench]`` table: the matrix's name and its defaults."""

    name: str = "bench"
    description: str = ""
    problems: list[str] = field(default_factory=list)
    optional_problems: list[str] = field(default_factory=list)
    seeds: list[int] = field(default_factory=lambda: [0])
    modes: list[str] = field(default_factory=lambda: ["stash"])
    budgets: list[str] = field(default_factory=lambda: ["evals:2000"])
    #: "none", a share of the best GPipe-EDP stash peak ("50%") or a size ("24GiB")
    memory_caps: list[str] = field(default_factory=lambda: [NO_CAP])


def _normalized(table: dict[str, Any], where: str, path: str) -> dict[str, Any]:
    """Budgets and memory caps in their normal form, each once (``secs:10,evals:2000`` and
    ``evals:2000,secs:10`` are one budget)."""
    out = dict(table)
    for key, norm in (("budgets", _check_budget), ("memory_caps", check_memory_cap)):
        if key in out:
            vals = [norm(v) for v in out[key]]
            for i, v in enumerate(vals):
                if v in vals[:i]:
                    raise ConfigError(f"{where}: field '{path}.{key}[{i}]': {out[key][i]!r} is "
                                      f"the same as [{vals.index(v)}]; expected each value "
                                      "once")
            out[key] = vals
    return out


def _check_matrix(bench: BenchSection, planners: Sequence[PlannerEntry], where: str) -> None:
    """Relations between tables: some problem; one label per memory cap; no planner entry
    that repeats another one's cells."""
    if not bench.problems and not bench.optional_problems:
        raise ConfigError(f"{where}: field 'bench': give 'problems' (or 'optional_problems'): "
                          "the matrix has none")
    # Two entries may share a label only under different memory caps (their cells' keys then
    # differ): e.g. tidgap uncapped on every problem, and tidgap at 50 % on the profiled ones.
    seen: dict[tuple[str, str], int] = {}
    for i, p in enumerate(planners):
        for cap in p.memory_caps or bench.memory_caps:
            key = (p.display.lower(), cap)
            if key in seen:
                raise ConfigError(
                    f"{where}: field 'planners[{i}]' has the same label {p.display!r} as "
                    f"planners[{seen[key]}] under memory cap {cap!r}; give one of them a "
                    "distinct 'label'")
            seen[key] = i
    # Two entries of one planner with the same settings compute the same cells under two
    # labels; where their seeds, modes, budgets and caps meet, every such cell runs twice.
    runs: dict[str, int] = {}
    for i, p in enumerate(planners):
        sig = json.dumps([p.name.lower(), p.settings], sort_keys=True, default=str)
        j = runs.get(sig)
        if j is None:
            runs[sig] = i
            continue
        q = planners[j]
        common = [set(a or b) & set(c or d) for a, b, c, d in (
            (p.seeds, bench.seeds, q.seeds, bench.seeds),
            (p.modes, bench.modes, q.modes, bench.modes),
            (p.budgets, bench.budgets, q.budgets, bench.budgets),
            (p.memory_caps, bench.memory_caps, q.memory_caps, bench.memory_caps))]
        if all(common):
            seed, mode, budget, cap = (sorted(c, key=str)[0] for c in common)
            raise ConfigError(
                f"{where}: field 'planners[{i}]' repeats planners[{j}] ({p.name!r}, same "
                f"settings): both run e.g. seed {seed}, mode {mode}, budget {budget}, memory "
                f"cap {cap}; a matrix lists each cell once (narrow its seeds, modes, budgets "
                "or memory_caps, or change its settings)")


@dataclass(frozen=True)
class BenchConfig:
    """A validated matrix and the file it came from (named in every error)."""

    bench: BenchSection
    planners: tuple[PlannerEntry, ...]
    source: str = "<memory>"

    @property
    def name(self) -> str:
        return self.bench.name

    def cells(self, problem_names: Sequence[str] | None = None) -> list[Cell]:
        """Expand the matrix: problems (in file order) x planners x modes x budgets x seeds.

        Problem patterns are matched against ``problem_names`` (default: the registry); a
        plain name that is not registered, or a pattern that matches nothing, is an error.
        """
        if problem_names is None:
            from ..registry import problem_names as registered

            problem_names = registered()
        known = list(problem_names)
        default = self._resolve(self.bench.problems, known, "bench.problems")
        default += [n for n in self._resolve(self.bench.optional_problems, known,
                                             "bench.optional_problems", optional=True)
                    if n not in default]
        if not default:
            raise ConfigError(f"{self.source}: bench.optional_problems: none is registered "
                              "and 'problems' is empty: the matrix has no problem")
        per_planner = [
            default if p.problems is None
            else self._resolve(p.problems, known, f"planners[{i}].problems")
            for i, p in enumerate(self.planners)
        ]
        order = list(dict.fromkeys(n for names in [default, *per_planner] for n in names))
        inputs = [planner_inputs(p.name, p.settings) for p in self.planners]
        out: list[Cell] = []
        for prob in order:
            for p, names, extra in zip(self.planners, per_planner, inputs):
                if prob not in names:
                    continue
                for cap in p.memory_caps or self.bench.memory_caps:
                    for mode in p.modes or self.bench.modes:
                        for budget in p.budgets or self.bench.budgets:
                            for seed in p.seeds or self.bench.seeds:
                                out.append(Cell(prob, p.display, p.name, dict(p.settings),
                                                seed, mode, budget, cap, extra))
        return out

    def _resolve(self, patterns: list[str], known: list[str], where: str,
                 optional: bool = False) -> list[str]:
        lower = {k.lower(): k for k in known}
        out: list[str] = []
        for i, pat in enumerate(patterns):
            if any(ch in pat for ch in "*?["):
                hits = sorted((k for k in known if fnmatch.fnmatchcase(k.lower(), pat.lower())),
                              key=_natural)
            else:
                hits = [lower[pat.lower()]] if pat.lower() in lower else []
            if not hits and not optional:
                raise ConfigError(
                    f"{self.source}: {where}[{i}]: {pat!r} matches no registered problem "
                    f"(see 'umpipe-bench problems')"
                )
            out.extend(h for h in hits if h not in out)
        return out

    def check_planners(self) -> None:
        """Fail early, naming the field, when a planner name does not resolve."""
        for i, p in enumerate(self.planners):
            try:
                planner_class(p.name)
            except (KeyError, ImportError, AttributeError) as exc:
                msg = exc.args[0] if exc.args else exc
                raise ConfigError(f"{self.source}: planners[{i}].name: {msg}") from None


def _natural(name: str) -> list[Any]:
    """Sort key putting sim-s4 before sim-s16 (digit runs compare as numbers)."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def planner_class(name: str) -> type:
    """A planner class by registry name, or by ``"module:Class"`` import path.

    The import path lets a matrix run a planner that is not an entry point (a test double,
    a planner under development) without registering it.
    """
    if ":" in name:
        module, _, attr = name.partition(":")
        return getattr(importlib.import_module(module), attr)
    from ..registry import get_planner_class

    return get_planner_class(name)


def settings_hash(settings: dict[str, Any], budget: str,
                  inputs: dict[str, Any] | None = None, memory_cap: str = NO_CAP) -> str:
    """A short stable hash of a cell's planner settings, budget and memory cap (part of its
    resume key).

    ``inputs`` are what the planner reads besides its settings (:func:`planner_inputs`); they
    enter the hash only when there are some, and the memory cap only when there is one, so
    the keys of uncapped planners without inputs stay as they were.
    """
    doc: dict[str, Any] = {"settings": settings, "budget": budget}
    if inputs:
        doc["inputs"] = inputs
    if memory_cap != NO_CAP:
        doc["memory_cap"] = memory_cap
    blob = json.dumps(doc, sort_keys=True, default=str)
    return hashlib.sha256(blob.encode()).hexdigest()[:12]


def planner_inputs(name: str, settings: dict[str, Any]) -> dict[str, Any]:
    """What planner ``name`` reads besides ``settings`` when it is built with them.

    A planner class may define ``resume_inputs(settings) -> dict`` (``tidgap-tuned`` returns
    the tuned settings it loads from its installed file), so that changing those inputs, e.g.
    ``umpipe-bench tune --install``, changes the resume key and the affected cells run again.
    A name that does not resolve has none (:meth:`BenchConfig.check_planners` reports it).
    """
    try:
        cls = planner_class(name)
    except (KeyError, ImportError, AttributeError):
        return {}
    hook = getattr(cls, "resume_inputs", None)
    return dict(hook(dict(settings))) if callable(hook) else {}


@dataclass(frozen=True)
class Cell:
    """One unit of work: one planner variant on one problem, mode, budget and seed."""

    problem: str
    planner: str  # the label rows carry
    planner_name: str  # registry name or module:Class
    settings: dict[str, Any] = field(hash=False, compare=False)
    seed: int = 0
    mode: str = "stash"
    budget: str = "evals:2000"
    memory_cap: str = NO_CAP
    #: what the planner reads besides its settings (:func:`planner_inputs`); part of the key
    inputs: dict[str, Any] = field(default_factory=dict, hash=False, compare=False)

    def __post_init__(self) -> None:
        if self.mode not in MODES:
            raise ConfigError(f"cell mode must be one of {MODES}, got {self.mode!r}")

    @property
    def settings_hash(self) -> str:
        return settings_hash(self.settings, self.budget, self.inputs, self.memory_cap)

    def key(self) -> tuple[str, str, int, str, str, str]:
        """What identifies finished work: (problem, planner, seed, mode, budget, settings
        hash); the hash covers the memory cap."""
        return (self.problem, self.planner, self.seed, self.mode, self.budget,
                self.settings_hash)

    @property
    def slug(self) -> str:
        """A file-name-safe id, e.g. ``sim-s4-b16-s0__tidgap__stash__s0__3f2a9c1b0d4e``."""
        raw = f"{self.problem}__{self.planner}__{self.mode}__s{self.seed}__{self.settings_hash}"
        return "".join(ch if ch.isalnum() or ch in "-_." else "-" for ch in raw)


def parse_config(data: dict[str, Any], source: str = "<memory>") -> BenchConfig:
    """Validate a decoded matrix (the dict ``tomllib`` gives) against :data:`SPEC`."""
    sc.check(data, SPEC, source, ConfigError)
    bench = BenchSection(**_normalized(data["bench"], source, "bench"))
    planners = tuple(PlannerEntry(**_normalized(p, source, f"planners[{i}]"))
                     for i, p in enumerate(data["planners"]))
    _check_matrix(bench, planners, source)
    return BenchConfig(bench, planners, source)


def load_config(path: str | Path) -> BenchConfig:
    """Read and validate a matrix file."""
    data = sc.load_toml(path, f"config {str(path)!r}", ConfigError)
    return parse_config(data, str(path))


def builtin_config(name: str) -> BenchConfig:
    """One of the matrices shipped with the package: ``default`` or ``full``."""
    res = resources.files(__package__).joinpath(f"{name}.toml")
    if not res.is_file():
        raise ConfigError(f"no built-in matrix {name!r}; built-in matrices: default, full")
    with resources.as_file(res) as p:
        return load_config(p)
