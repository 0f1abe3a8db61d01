"""The runner: one matrix -> one leaderboard, cell by cell, resumable.

For each cell not yet in the leaderboard (key: problem, planner, seed, mode, budget, settings
hash) the runner builds the planner, plans, re-simulates the plan (the simulator, not the
planner's own evaluator, gives ``T_pred``: a planner that misreports is an error row), saves
the plan and its search history, compares with the best GPipe-EDP and 1F1B-EDP of the same
problem and mode (:mod:`.baselines`), and rewrites the leaderboard atomically. Any exception
inside a cell becomes that cell's ``error``; only an interrupt stops the batch, and then every
finished cell is already on disk.

Layout of an output folder::

    leaderboard.csv      one row per cell (see leaderboard.COLUMNS)
    baselines.json       best EDP per (problem, mode), a cache
    plans/<cell>.json    the plan each cell found (umpipe-plan/1)
    histories/<cell>.json  the planner's per-generation / per-trial records
    real/*.csv           written by `umpipe-bench execute`: joined as measured times
"""

from __future__ import annotations

import json
import math
import os
import sys
import time
import traceback
from collections.abc import Callable, Iterable, Sequence
from concurrent.futures import FIRST_COMPLETED, Future, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..errors import InternalError, UserInputError
from ..planners.evaluation.reference import EdpReference, clear_cache, speedup
from ..problem import Problem, atomic_write_text
from ..runtime.lifetime import kill_pool, process_pool
from .baselines import BaselineCache, problem_digest
from .config import BenchConfig, Cell, planner_class
from .leaderboard import Leaderboard, flatten_settings
from .measured import MeasuredIndex
from .memcap import NO_CAP, apply_memory_cap
from .provenance import git_revision, timestamp, versions

__all__ = ["BenchError", "RunSummary", "history_records", "run_cell", "run_matrix",
           "select_cells"]


#: a cell's result is inconsistent (e.g. the planner's T disagrees with the simulator)
BenchError = InternalError


@dataclass
class RunSummary:
    """What one ``run_matrix`` call did."""

    total: int
    skipped: int
    ran: int
    errors: int
    seconds: float
    leaderboard: Path
    #: cells skipped as done whose row holds an error (rerun with ``retry_errors``)
    kept_errors: int = 0

    @property
    def failed(self) -> int:
        """Cells of this matrix whose leaderboard row is an error row."""
        return self.errors + self.kept_errors

    def __str__(self) -> str:
        kept = f", {self.kept_errors} of them error rows" if self.kept_errors else ""
        return (f"{self.total} cells: {self.ran} run ({self.errors} with errors), "
                f"{self.skipped} already done{kept}; {self.seconds:.1f} s; leaderboard "
                f"{self.leaderboard}")


def _jsonable(v: Any) -> Any:
    if hasattr(v, "tolist"):  # numpy scalars and arrays
        return v.tolist()
    return str(v)


def history_records(history: Any) -> list[dict[str, Any]]:
    """A planner's history as a list of dicts (a DEAP Logbook already is one)."""
    if history is None:
        return []
    return [dict(r) for r in history]


def _write_json(path: Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, default=_jsonable) + "\n")


def _load_problem(name: str) -> Problem:
    from ..registry import get_problem

    return get_problem(name)


def run_cell(cell: Cell, out_dir: str | os.PathLike[str]) -> dict[str, Any]:
    """Run one cell and return its result columns; a failure is returned as ``error``.

    Writes ``plans/<slug>.json`` and ``histories/<slug>.json`` under ``out_dir``. A plan whose
    peak memory exceeds the cell's memory cap on any stage is an error row.
    """
    from ..memory import MemoryCapError, check_fits
    from ..simulator import simulate

    out = Path(out_dir)
    row: dict[str, Any] = {**flatten_settings(cell.settings)}
    try:
        clear_cache()  # each planner pays for its own EDP scans (its wall_time)
        problem, _ = apply_memory_cap(_load_problem(cell.problem), cell.memory_cap)
        planner = planner_class(cell.planner_name)(**cell.settings)
        row.update(flatten_settings(getattr(planner, "settings", cell.settings)))
        try:
            res = planner.plan(problem, mode=cell.mode, budget=cell.budget, seed=cell.seed)
        except MemoryCapError as exc:  # no plan of this planner fits: a result, not a failure
            row.update({"plan_kind": "none fits", "infeasible": str(exc), "error": ""})
            return row
        tl = simulate(problem, res.plan, res.schedule)
        T = float(tl.iteration_time)
        try:
            check_fits(tl.peak_memory or [], tl.capacity,
                       f"the plan of planner {cell.planner!r} ({res.schedule} schedule)")
        except MemoryCapError as exc:  # the planner broke its contract: an error row
            raise BenchError(str(exc)) from None
        if not math.isclose(T, res.iteration_time, rel_tol=1e-6, abs_tol=1e-12):
            raise BenchError(
                f"planner {cell.planner!r} reported T = {res.iteration_time!r} s but the "
                f"simulator gives {T!r} s for its plan ({res.schedule} schedule)"
            )
        row.update(flatten_settings(res.settings or {}))
        plan_rel = f"plans/{cell.slug}.json"
        hist_rel = f"histories/{cell.slug}.json"
        res.plan.save(out / plan_rel)
        _write_json(out / hist_rel, {
            "problem": cell.problem, "planner": cell.planner, "seed": cell.seed,
            "mode": cell.mode, "budget": cell.budget, "settings_hash": cell.settings_hash,
            "start_time": res.start_time, "iteration_time": T,
            "evaluations": res.evaluations, "wall_time": res.wall_time,
            "records": history_records(res.history),
        })
        row.update({
            "schedule": res.schedule,
            "plan_kind": res.plan.describe(),
            "caps": "" if res.plan.caps is None else ";".join(map(str, res.plan.caps)),
            "peak_memory_max": None if tl.peak_memory is None else max(tl.peak_memory),
            "peak_memory": "" if tl.peak_memory is None else ";".join(
                f"{p:.0f}" for p in tl.peak_memory),
            "T_pred": T,
            "T_start": res.start_time,
            "evaluations": res.evaluations,
            "wall_time": res.wall_time,
            "plan_file": plan_rel,
            "history_file": hist_rel,
            "error": "",
        })
    except Exception as exc:  # a failing cell is a row (nevergrad's habit)
        last = traceback.extract_tb(exc.__traceback__)[-1:] if exc.__traceback__ else []
        where = f" [{Path(last[0].filename).name}:{last[0].lineno}]" if last else ""
        row["error"] = f"{type(exc).__name__}: {exc}{where}".replace("\n", " ")
    return row


def _problem_columns(name: str, cache: dict[str, Problem | Exception]) -> dict[str, Any]:
    if name not in cache:
        try:
            cache[name] = _load_problem(name)
        except Exception as exc:
            cache[name] = exc
    p = cache[name]
    if isinstance(p, Exception):
        return {"problem": name}
    return {"problem": name, "S": p.S, "B": p.B, "source": p.source, "device": p.device,
            "model": p.provenance.get("model", ""), "problem_digest": problem_digest(p)}


def _capped(cell: Cell, problems: dict[str, Problem | Exception]
            ) -> tuple[Problem | Exception, str | None]:
    """The cell's problem under its memory cap (the uncapped one is cached by name)."""
    problem = problems.get(cell.problem)
    if not isinstance(problem, Problem) or cell.memory_cap == NO_CAP:
        return problem if problem is not None else KeyError(cell.problem), None
    key = f"{cell.problem}|{cell.memory_cap}"
    if key not in problems:
        try:
            problems[key] = apply_memory_cap(problem, cell.memory_cap)[0]
        except Exception as exc:
            problems[key] = exc
    capped = problems[key]
    return capped, None if isinstance(capped, Exception) else _cap_bytes(capped)


def _cap_bytes(problem: Problem) -> str | None:
    """Per-stage caps in bytes, ';'-joined (the leaderboard's ``memory_cap_bytes``)."""
    caps = [st.memory.capacity_bytes for st in problem.stages if st.memory is not None]
    if not caps or any(c is None for c in caps):
        return None
    return ";".join(f"{c:.0f}" for c in caps)


def _assemble(cell: Cell, result: dict[str, Any], problems: dict[str, Problem | Exception],
              baselines: BaselineCache, measured: MeasuredIndex) -> dict[str, Any]:
    row = _problem_columns(cell.problem, problems)
    row.update({"planner": cell.planner, "planner_name": cell.planner_name, "seed": cell.seed,
                "mode": cell.mode, "budget": cell.budget, "settings_hash": cell.settings_hash,
                "memory_cap": cell.memory_cap})
    row.update(result)
    problem, cap_bytes = _capped(cell, problems)
    row["memory_cap_bytes"] = cap_bytes
    if isinstance(problem, Problem):
        try:
            base = baselines.get(problem, cell.mode)
            edp = EdpReference(base["gpipe"], base["1f1b"])
            row.update({"T_gpipe_edp": edp.gpipe.T, "M_gpipe_edp": edp.gpipe.M,
                        "T_1f1b_edp": edp.one_f_one_b.T, "M_1f1b_edp": edp.one_f_one_b.M,
                        "T_best_edp": edp.best_T})
            tb = baselines.torch(problem, cell.mode)
            row.update({"T_best_torch": tb.T, "best_torch_schedule": tb.schedule,
                        "M_best_torch": tb.M})
            if not row.get("error") and row.get("T_pred") is not None:
                gains = edp.speedups(row["T_pred"])
                row.update({"speedup_vs_gpipe": gains["gpipe"],
                            "speedup_vs_1f1b": gains["1f1b"],
                            "speedup_vs_best_edp": gains["best_edp"],
                            "speedup_vs_best_torch": speedup(tb.T, row["T_pred"])})
        except Exception as exc:
            row["error"] = row.get("error") or f"baseline: {type(exc).__name__}: {exc}"
    elif not row.get("error"):
        row["error"] = f"problem: {problem}"
    row.update(measured.columns(row))
    row.update(versions())
    row["git_rev"] = git_revision()
    row["timestamp"] = timestamp()
    return row


def select_cells(cells: Sequence[Cell], *, limit: int | None = None,
                 shard: tuple[int, int] | None = None) -> list[Cell]:
    """Trim a matrix: the first ``limit`` cells (nevergrad's ``cap_index``), then every
    ``n``-th from ``i`` for ``shard=(i, n)`` (several machines, one matrix each part)."""
    out = list(cells)
    if limit is not None:
        if limit < 1:
            raise UserInputError(f"--limit must be >= 1, got {limit}")
        out = out[:limit]
    if shard is not None:
        i, n = shard
        if not 0 <= i < n:
            raise UserInputError(f"--shard I/N needs 0 <= I < N, got {i}/{n}")
        out = out[i::n]
    return out


def _results(cells: Sequence[Cell], out: Path, jobs: int, executor: str = "process",
             scheduler: str | None = None) -> Iterable[tuple[Cell, dict]]:
    """(cell, result) in completion order; in this process when ``jobs == 1``; on dask
    workers with ``executor="dask"`` (:mod:`.executors`).

    With ``jobs > 1``, leaving early (an interrupt, SIGTERM, an error) kills the workers and
    their cells at once; the finished cells are already in the leaderboard.
    """
    if executor == "dask":
        from .executors import dask_results

        yield from dask_results(cells, out, jobs, scheduler, run_cell)
        return
    if jobs <= 1:
        for c in cells:
            yield c, run_cell(c, out)
        return
    ex = process_pool(jobs)
    todo = list(cells)
    running: dict[Future, Cell] = {}
    finished_all = False
    try:
        while todo or running:
            while todo and len(running) < jobs:
                c = todo.pop(0)
                running[ex.submit(run_cell, c, out)] = c
            finished, _ = wait(running, return_when=FIRST_COMPLETED)
            for f in finished:
                yield running.pop(f), f.result()
        finished_all = True
    finally:
        if not finished_all:
            kill_pool(ex)
        ex.shutdown(wait=True, cancel_futures=True)


def _isatty(stream: object) -> bool:
    """Whether ``stream`` is a terminal (False for anything without ``isatty``)."""
    try:
        return bool(stream.isatty())  # type: ignore[attr-defined]
    except (AttributeError, ValueError):  # no isatty, or a closed stream
        return False


def _cell_line(name: str, done: int, total: int, cell: Cell, row: dict[str, object],
               elapsed: float) -> str:
    """One progress line for a finished cell, for logs where no bar is drawn."""
    if row.get("error"):
        what = "error"
    elif row.get("infeasible"):
        what = "infeasible"
    else:
        t = row.get("T_pred")
        what = f"T {t:.6g}" if isinstance(t, float) else "done"
    return (f"bench {name}: {done}/{total} {cell.problem} {cell.planner} {cell.mode} "
            f"seed {cell.seed} {cell.budget}: {what} ({elapsed:.0f} s)")


def run_matrix(
    config: BenchConfig,
    out_dir: str | os.PathLike[str] = "results",
    *,
    limit: int | None = None,
    shard: tuple[int, int] | None = None,
    jobs: int = 1,
    retry_errors: bool = False,
    progress: bool | None = None,
    log: Callable[[str], None] | None = None,
    executor: str = "process",
    scheduler: str | None = None,
) -> RunSummary:
    """Run every cell of ``config`` not already in ``out_dir/leaderboard.csv``.

    ``executor="dask"`` runs the cells on a dask cluster (``scheduler`` address; None: a local
    cluster of ``jobs`` workers) while this process writes every row (:mod:`.executors`).

    ``progress=None`` shows a tqdm bar on a terminal and, when stderr is not one (a log file,
    a pipe, CI), one line per finished cell on stderr instead, so a long run is never silent.
    Error rows count as done unless ``retry_errors``. Returns what was done; the leaderboard
    is complete after every cell.
    """
    from tqdm import tqdm

    t0 = time.perf_counter()
    out = Path(out_dir)
    from .executors import EXECUTORS

    if executor not in EXECUTORS:
        raise UserInputError(f"--executor must be one of {', '.join(EXECUTORS)}, got "
                             f"{executor!r}")
    if scheduler is not None and executor != "dask":
        raise UserInputError("--scheduler needs --executor dask")
    config.check_planners()
    cells = select_cells(config.cells(), limit=limit, shard=shard)
    board = Leaderboard(out / "leaderboard.csv")
    measured = MeasuredIndex.load(out / "real")
    if measured and measured.refresh(board.rows):
        board.merge(board.rows)
    problems: dict[str, Problem | Exception] = {}
    digests = {name: _problem_columns(name, problems).get("problem_digest")
               for name in dict.fromkeys(c.problem for c in cells)}
    done = board.done(digests, with_errors=not retry_errors)
    pending = [c for c in cells if c.key() not in done]
    error_keys = done - board.done(digests, with_errors=False)
    kept_errors = sum(c.key() in error_keys for c in cells)
    baselines = BaselineCache(out / "baselines.json")
    errors = 0
    bar = tqdm(total=len(cells), initial=len(cells) - len(pending), unit="cell",
               desc=f"bench {config.name}", disable=(None if progress is None else not progress),
               dynamic_ncols=True)
    lines = progress is None and not _isatty(sys.stderr)
    finished = len(cells) - len(pending)
    try:
        for cell, result in _results(pending, out, jobs, executor, scheduler):
            row = _assemble(cell, result, problems, baselines, measured)
            board.add(row)
            finished += 1
            if row.get("error"):
                errors += 1
                msg = f"error in {cell.slug}: {row['error']}"
                (log or bar.write)(msg)
            if lines:
                print(_cell_line(config.name, finished, len(cells), cell, row,
                                 time.perf_counter() - t0), file=sys.stderr, flush=True)
            bar.set_postfix_str(f"{cell.problem} {cell.planner}", refresh=False)
            bar.update()
    finally:
        bar.close()
    if not board.path.exists():
        board.write()  # an empty matrix slice still leaves a (header-only) leaderboard
    return RunSummary(len(cells), len(cells) - len(pending), len(pending), errors,
                      time.perf_counter() - t0, board.path, kept_errors)
