"""Benchmark matrices: TOML files that list problems x planners x seeds x modes with budgets.

A matrix file has one ``[bench]`` table of defaults and one ``[[planners]]`` table per planner
variant; a planner may narrow or override any of the defaults (its own seeds, modes, budgets
or problems). Validation is pydantic's; every error names the file and the
field, e.g. ``planners[1].settings``. Expanding a matrix gives :class:`Cell` objects, ordered
problem by problem, whose :meth:`Cell.key` is what a resumed run uses to skip finished work.

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
import tomllib
from collections.abc import Sequence
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from ..errors import InputError
from ..plan import MODES
from ..planners.search.base import Budget, PlannerError
from .memcap import NO_CAP, check_memory_cap

__all__ = [
    "BenchConfig",
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

Mode = Literal["stash", "recompute"]


#: a malformed matrix file; the message names the file and the field
ConfigError = InputError


def _check_budget(v: str) -> str:
    try:
        return str(Budget.parse(v))
    except PlannerError as exc:
        raise ValueError(str(exc)) from None


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PlannerEntry(_Strict):
    """One planner variant of the matrix; unset fields take the ``[bench]`` defaults."""

    name: str = Field(min_length=1)
    label: str | None = None
    settings: dict[str, Any] = Field(default_factory=dict)
    seeds: list[int] | None = Field(default=None, min_length=1)
    modes: list[Mode] | None = Field(default=None, min_length=1)
    budgets: list[str] | None = Field(default=None, min_length=1)
    problems: list[str] | None = Field(default=None, min_length=1)
    memory_caps: list[str] | None = Field(default=None, min_length=1)

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else [_check_budget(b) for b in v]

    @field_validator("memory_caps")
    @classmethod
    def _caps(cls, v: list[str] | None) -> list[str] | None:
        return None if v is None else [check_memory_cap(c) for c in v]

    @property
    def display(self) -> str:
        return self.label or self.name


class BenchSection(_Strict):
    """The ``[bench]`` table: the matrix's name and its defaults."""

    name: str = "bench"
    description: str = ""
    problems: list[str] = Field(default_factory=list)
    optional_problems: list[str] = Field(default_factory=list)
    seeds: list[int] = Field(default=[0], min_length=1)
    modes: list[Mode] = Field(default=["stash"], min_length=1)
    budgets: list[str] = Field(default=["evals:2000"], min_length=1)
    #: "none", a share of the best GPipe-EDP stash peak ("50%") or a size ("24GiB")
    memory_caps: list[str] = Field(default=[NO_CAP], min_length=1)

    @field_validator("budgets")
    @classmethod
    def _budgets(cls, v: list[str]) -> list[str]:
        return [_check_budget(b) for b in v]

    @field_validator("memory_caps")
    @classmethod
    def _caps(cls, v: list[str]) -> list[str]:
        return [check_memory_cap(c) for c in v]

    @model_validator(mode="after")
    def _some_problems(self) -> BenchSection:
        if not self.problems and not self.optional_problems:
            raise ValueError("give 'problems' (or 'optional_problems'): the matrix has none")
        return self


class _MatrixFile(_Strict):
    """The schema of a whole matrix file."""

    bench: BenchSection
    planners: list[PlannerEntry] = Field(min_length=1)

    @model_validator(mode="after")
    def _unique_labels(self) -> _MatrixFile:
        """Two entries may share a label only under different memory caps (their cells'
        keys then differ): e.g. tidgap uncapped on every problem, and tidgap at 50 % on the
        profiled ones."""
        seen: dict[tuple[str, str], int] = {}
        for i, p in enumerate(self.planners):
            for cap in p.memory_caps or self.bench.memory_caps:
                key = (p.display.lower(), cap)
                if key in seen:
                    raise ValueError(
                        f"planners[{i}] has the same label {p.display!r} as planners"
                        f"[{seen[key]}] under memory cap {cap!r}; give one of them a distinct "
                        "'label'"
                    )
                seen[key] = i
        return self


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


def _format_error(source: str, exc: ValidationError) -> str:
    lines = []
    for err in exc.errors():
        loc = ""
        for part in err["loc"]:
            loc += f"[{part}]" if isinstance(part, int) else (f".{part}" if loc else str(part))
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden":
            msg = "unknown field"
        lines.append(f"{loc or '<top>'}: {msg}")
    return f"{source}: " + "; ".join(lines)


def parse_config(data: dict[str, Any], source: str = "<memory>") -> BenchConfig:
    """Validate a decoded matrix (the dict ``tomllib`` gives)."""
    try:
        spec = _MatrixFile.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format_error(source, exc)) from None
    return BenchConfig(spec.bench, tuple(spec.planners), source)


def load_config(path: str | Path) -> BenchConfig:
    """Read and validate a matrix file."""
    path = Path(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"config {str(path)!r}: cannot read: {exc.strerror}") from None
    try:
        data = tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"config {str(path)!r}: not valid TOML: {exc}") from None
    return parse_config(data, str(path))


def builtin_config(name: str) -> BenchConfig:
    """One of the matrices shipped with the package: ``default`` or ``full``."""
    res = resources.files(__package__).joinpath(f"{name}.toml")
    if not res.is_file():
        raise ConfigError(f"no built-in matrix {name!r}; built-in matrices: default, full")
    with resources.as_file(res) as p:
        return load_config(p)
