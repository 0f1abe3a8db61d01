"""Tune a GA planner's settings with Optuna: train on some problems, judge on held-out ones.

A trial picks settings (population, crossover and mutation probabilities, mutation strengths,
tournament size, elitism, the initial-population mix), runs the planner on every training cell
(problem x mode x seed, one budget) and scores the geometric-mean speedup over the best
GPipe-EDP plan: ``exp(mean(log(T_gpipe / T))) - 1``. The planner's defaults are the first
trial of a new study, so the tuned settings are never worse than them on the training cells.

Studies live in any Optuna RDB storage (``sqlite:///results/tuning.db`` by default): run the
same command with the same ``--storage`` and ``--study-name`` on several machines and they
share one study (``load_if_exists``); give each a different ``--seed`` so their TPE samplers
do not propose the same points. A study remembers what it tunes (planner, training cells,
budget) and refuses to continue with different ones.

:func:`finish` evaluates the defaults and the best settings on the held-out cells (same seeds,
same budget) and writes both into the settings file that the ``tidgap-tuned`` planner loads
(:mod:`umpipe_bench.planners.algorithms.tuned`).
"""

from __future__ import annotations

import json
import logging
import math
import os
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from ..errors import InputError
from ..planners.algorithms.tuned import TUNED_SCHEMA
from ..planners.search.base import Budget
from ..problem import atomic_write_text
from .baselines import BaselineCache
from .config import planner_class
from .provenance import git_revision, timestamp, versions
from .storage import (
    check_storage,
    connect_args,
    describe_failure,
    sqlite_path,
    storage_label,
    storage_lock,
)

__all__ = ["SEARCH_SPACE", "TUNED_SCHEMA", "TuneError", "TuneSpec", "check_spec",
           "evaluate_settings", "finish",
           "open_study", "run_study", "search_space", "storage_label"]

#: Ranges Optuna draws from, for every GA setting a planner declares in its ``defaults``:
#: ``(kind, low, high, log)``; kind "int", "float" or "bool". (elites <= 8 < population.)
SEARCH_SPACE: dict[str, tuple[str, float, float, bool]] = {
    "population": ("int", 16, 1024, True),
    "cxpb": ("float", 0.2, 1.0, False),
    "mutpb": ("float", 0.05, 1.0, False),
    "flip_rate": ("float", 0.1, 4.0, True),
    "shift_rate": ("float", 0.0, 16.0, False),  # TiDGAP's default is 8, DGAP's 2
    "tournament": ("int", 2, 8, False),
    "elites": ("int", 1, 8, False),
    "edp_seeds": ("int", 1, 16, True),
    "greedy_seeds": ("bool", 0, 1, False),
}


@dataclass(frozen=True)
class TuneSpec:
    """What a study tunes and on what; stored in the study so every worker agrees."""

    planner: str = "tidgap"
    train: tuple[str, ...] = ("sim-s4-b64-s1", "sim-s8-b16-s1", "sim-s8-b64-s1",
                              "sim-s16-b16-s0")
    heldout: tuple[str, ...] = ("sim-s4-b16-s0", "sim-s8-b64-s0", "sim-s16-b64-s1")
    modes: tuple[str, ...] = ("stash", "recompute")
    seeds: tuple[int, ...] = (0, 1)
    budget: str = "evals:3000"
    fixed: dict[str, Any] = field(default_factory=dict)  # settings held constant

    def identity(self) -> dict[str, Any]:
        """The attributes a shared study must agree on (held-out problems may differ)."""
        return {"planner": self.planner, "train": list(self.train), "modes": list(self.modes),
                "seeds": list(self.seeds), "budget": self.budget,
                "fixed": json.dumps(self.fixed, sort_keys=True)}


#: a tuning run that cannot start (planner, study); the message says why
TuneError = InputError


def search_space(planner: str) -> dict[str, tuple[str, float, float, bool]]:
    """The part of :data:`SEARCH_SPACE` that ``planner`` has settings for."""
    defaults = getattr(planner_class(planner), "defaults", None)
    if not isinstance(defaults, Mapping):
        raise TuneError(f"planner {planner!r} declares no 'defaults' settings: nothing to tune "
                        "(tune a GA planner: tidgap or dgap)")
    space = {k: v for k, v in SEARCH_SPACE.items() if k in defaults}
    if not space:
        raise TuneError(
            f"planner {planner!r} has none of the tunable settings {', '.join(SEARCH_SPACE)}: "
            "nothing to tune (tune a GA planner: tidgap or dgap)")
    return space


def _suggest(trial: Any, space: dict[str, tuple[str, float, float, bool]]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for name, (kind, lo, hi, log) in space.items():
        if kind == "int":
            out[name] = trial.suggest_int(name, int(lo), int(hi), log=log)
        elif kind == "float":
            out[name] = trial.suggest_float(name, lo, hi, log=log)
        else:
            out[name] = trial.suggest_categorical(name, [True, False])
    return out


def evaluate_settings(
    planner: str, settings: dict[str, Any], problems: Sequence[str], modes: Sequence[str],
    seeds: Sequence[int], budget: str, baselines: BaselineCache | None = None,
) -> dict[str, float]:
    """Mean ``log(T_gpipe / T)`` per problem over modes x seeds (higher is better)."""
    from ..registry import get_problem

    baselines = baselines or BaselineCache()
    cls = planner_class(planner)
    out: dict[str, float] = {}
    for name in problems:
        problem = get_problem(name)
        logs = []
        for mode in modes:
            T_ref = baselines.get(problem, mode)["gpipe"].T
            for seed in seeds:
                res = cls(**settings).plan(problem, mode=mode, budget=budget, seed=seed)
                logs.append(math.log(T_ref / res.iteration_time))
        out[name] = sum(logs) / len(logs)
    return out


def gmean_speedup(per_problem: dict[str, float]) -> float:
    """Geometric-mean speedup from mean log-ratios: ``exp(mean) - 1``."""
    return math.exp(sum(per_problem.values()) / len(per_problem)) - 1.0


def check_spec(spec: TuneSpec) -> None:
    """Everything a run needs that can be checked before a study is touched: the planner is
    tunable, its budget parses, its defaults build a planner."""
    space = search_space(spec.planner)
    Budget.parse(spec.budget)
    defaults = planner_class(spec.planner).defaults
    planner_class(spec.planner)(**{**spec.fixed, **{k: defaults[k] for k in space}})


def open_study(spec: TuneSpec, storage: str, study_name: str, seed: int | None, *,
               create: bool = True) -> Any:
    """Create or join the study; refuse one made for a different planner/cells/budget.

    The spec and the storage are checked first (:func:`check_spec`,
    :func:`.storage.check_storage`), so a bad one leaves no study behind; a database that
    cannot be opened (a server that cannot be reached, a file that is not a database) is a
    one-line :class:`~.storage.StorageError`. With ``create=False`` only an existing study is
    opened (nothing is created: no file, no table, no study) and a missing one is a
    :class:`TuneError`.
    """
    from sqlalchemy.exc import SQLAlchemyError

    check_spec(spec)
    check_storage(storage)
    try:
        if not create:
            return _load_study(storage, study_name, seed)
        with storage_lock(storage):
            return _create_study(spec, storage, study_name, seed)
    except SQLAlchemyError as exc:
        raise describe_failure(storage, exc) from None


def _rdb(storage: str, create: bool) -> Any:
    """Optuna's storage for ``storage``, its connections bounded in time
    (:func:`.storage.connect_args`)."""
    import optuna

    args = connect_args(storage)
    return optuna.storages.RDBStorage(
        storage, engine_kwargs={"connect_args": args} if args else None,
        skip_table_creation=not create)


def _load_study(storage: str, study_name: str, seed: int | None) -> Any:
    import optuna

    missing = TuneError(f"study {study_name!r} does not exist in {storage_label(storage)}; "
                        "--trials 0 only judges an existing study (give --trials N to add N "
                        "trials)")
    path = sqlite_path(storage)
    if path is not None and (not path.exists() or path.stat().st_size == 0):
        raise missing  # opening it would create the file
    rdb = _rdb(storage, create=False)
    if study_name not in {s.study_name for s in rdb.get_all_studies()}:
        raise missing
    return optuna.load_study(study_name=study_name, storage=rdb,
                             sampler=optuna.samplers.TPESampler(seed=seed))


def _create_study(spec: TuneSpec, storage: str, study_name: str, seed: int | None) -> Any:
    import optuna

    study = optuna.create_study(storage=_rdb(storage, create=True), study_name=study_name,
                                direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed),
                                load_if_exists=True)
    mine = spec.identity()
    theirs = {k: study.user_attrs[k] for k in mine if k in study.user_attrs}
    if not theirs:
        for k, v in mine.items():
            study.set_user_attr(k, v)
        defaults = planner_class(spec.planner).defaults
        first = {k: defaults[k] for k in search_space(spec.planner)}
        study.enqueue_trial(first, user_attrs={"defaults": True}, skip_if_exists=True)
    else:
        diff = [k for k in mine if theirs.get(k) != mine[k]]
        if diff:
            raise TuneError(
                f"study {study_name!r} in {storage_label(storage)} tunes something else: "
                + "; ".join(f"{k}: study has {theirs.get(k)!r}, this run {mine[k]!r}"
                            for k in diff)
                + ". Use another --study-name, or the study's settings."
            )
    return study


def run_study(study: Any, spec: TuneSpec, *, trials: int | None, timeout: float | None,
              progress: bool = False) -> None:
    """Add ``trials`` trials (or run until ``timeout`` seconds) to the study."""
    import optuna

    space = search_space(spec.planner)
    baselines = BaselineCache()

    def objective(trial: optuna.Trial) -> float:
        settings = {**spec.fixed, **_suggest(trial, space)}
        per = evaluate_settings(spec.planner, settings, spec.train, spec.modes, spec.seeds,
                                spec.budget, baselines)
        for name, v in per.items():
            trial.set_user_attr(f"speedup_{name}", math.exp(v) - 1.0)
        return gmean_speedup(per)

    verbosity = optuna.logging.get_verbosity()
    optuna.logging.set_verbosity(optuna.logging.WARNING)
    # Optuna's trial messages come from its modules' loggers, through the handlers of its
    # root logger: the filter goes on those
    handlers = optuna.logging.get_logger("optuna").handlers
    for h in handlers:
        h.addFilter(_signal_without_traceback)
    try:
        study.optimize(objective, n_trials=trials, timeout=timeout,
                       show_progress_bar=progress, gc_after_trial=False)
    finally:
        for h in handlers:
            h.removeFilter(_signal_without_traceback)
        optuna.logging.set_verbosity(verbosity)


def _signal_without_traceback(record: logging.LogRecord) -> bool:
    """Optuna logs the trial that SIGINT or SIGTERM ended as failed, with the traceback of
    the signal's exception; the warning stays, in one line."""
    info = record.exc_info
    if info and info[0] is not None and issubclass(info[0], KeyboardInterrupt):
        record.exc_info = None
    return True


@dataclass
class TuneResult:
    """What :func:`finish` saves: the tuned settings and the held-out comparison."""

    schema: str
    planner: str
    settings: dict[str, Any]
    study: dict[str, Any]
    train: dict[str, Any]
    heldout: dict[str, Any]
    created: str
    git_rev: str
    versions: dict[str, str]


def finish(study: Any, spec: TuneSpec, storage: str, path: str | os.PathLike[str]) -> TuneResult:
    """Judge the study's best settings against the defaults on the held-out cells; save."""
    import optuna

    done = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not done:
        raise TuneError(f"study {study.study_name!r} has no finished trial yet")
    best = study.best_trial
    defaults_trial = next((t for t in done if t.user_attrs.get("defaults")), None)
    planner_defaults = planner_class(spec.planner).defaults
    tuned = {**spec.fixed, **best.params}
    default_settings = {**spec.fixed, **{k: planner_defaults[k] for k in best.params}}
    baselines = BaselineCache()
    held = {}
    for label, settings in (("default", default_settings), ("tuned", tuned)):
        per = evaluate_settings(spec.planner, settings, spec.heldout, spec.modes, spec.seeds,
                                spec.budget, baselines)
        held[label] = {"gmean_speedup_vs_gpipe": gmean_speedup(per),
                       "per_problem": {k: math.exp(v) - 1.0 for k, v in per.items()}}
    result = TuneResult(
        schema=TUNED_SCHEMA,
        planner=spec.planner,
        settings=tuned,
        study={"name": study.study_name, "storage": storage_label(storage),
               "sampler": "TPESampler", "trials": len(done),
               "best_trial": best.number},
        train={"problems": list(spec.train), "modes": list(spec.modes),
               "seeds": list(spec.seeds), "budget": spec.budget,
               "tuned": best.value,
               "default": defaults_trial.value if defaults_trial is not None else None},
        heldout={"problems": list(spec.heldout), "modes": list(spec.modes),
                 "seeds": list(spec.seeds), "budget": spec.budget, **held},
        created=timestamp(),
        git_rev=git_revision(),
        versions=versions(),
    )
    atomic_write_text(path, json.dumps(asdict(result), indent=1) + "\n")
    return result


def summary_markdown(result: TuneResult) -> str:
    """Tuned vs default, train and held-out, as markdown."""
    h = result.heldout
    lines = [
        f"# Tuning {result.planner}: tuned vs default settings",
        "",
        f"Study `{result.study['name']}` ({result.study['trials']} trials, "
        f"{result.study['sampler']}, storage `{result.study['storage']}`), "
        f"budget {h['budget']}, modes {', '.join(h['modes'])}, seeds "
        f"{', '.join(map(str, h['seeds']))}; git {result.git_rev}, {result.created}.",
        "Score: geometric-mean speedup over the best GPipe-EDP plan (predicted).",
        "",
        "| cells | problems | default | tuned |",
        "|---|---|---|---|",
    ]
    tr = result.train
    if tr["default"] is not None:
        lines.append(f"| train | {', '.join(tr['problems'])} | {tr['default']:+.2%} | "
                     f"{tr['tuned']:+.2%} |")
    lines.append(f"| **held-out** | {', '.join(h['problems'])} | "
                 f"{h['default']['gmean_speedup_vs_gpipe']:+.2%} | "
                 f"{h['tuned']['gmean_speedup_vs_gpipe']:+.2%} |")
    for p in h["problems"]:
        lines.append(f"| held-out | {p} | {h['default']['per_problem'][p]:+.2%} | "
                     f"{h['tuned']['per_problem'][p]:+.2%} |")
    lines += ["", "Tuned settings:", "", "```json",
              json.dumps(result.settings, indent=1, sort_keys=True), "```", ""]
    return "\n".join(lines)
