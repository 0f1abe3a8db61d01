"""The leaderboard: long-format CSV, one row per (problem, planner, seed, mode, budget).

The fixed columns are :data:`COLUMNS` (pinned by a schema test); each planner setting adds a
``param_<name>`` column after them (as optuna's ``params_x``). A failed cell
is a row whose ``error`` column is set, not a crashed batch (as nevergrad's benchmarks do).

The file is rewritten whole through a temporary file and ``os.replace`` after every cell, so a
reader, or a run killed at any instant, only ever sees a complete file of complete rows; each
rewrite re-reads and merges the file under an ``flock`` on a sidecar ``.lock`` file, so
concurrent writers (shards sharing one folder) lose no rows. A file that cannot be read whole
is refused, never overwritten.
"""

from __future__ import annotations

import csv
import io
import math
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from ..errors import InputError
from ..filelock import sidecar_lock
from ..problem import atomic_write_text

__all__ = [
    "COLUMNS",
    "KEY_COLUMNS",
    "PARAM_PREFIX",
    "VERSION_PACKAGES",
    "Leaderboard",
    "LeaderboardError",
    "flatten_settings",
    "read_rows",
    "row_key",
    "scan_rows",
]

PARAM_PREFIX = "param_"

#: Packages whose versions every row records (read from metadata: nothing is imported).
VERSION_PACKAGES = ("numpy", "deap", "optuna", "torch", "umpipe-bench")

#: The fixed columns, in file order. ``param_*`` columns follow, sorted.
COLUMNS: tuple[str, ...] = (
    # the problem (problem_digest: a hash of its costs; a row of another version is redone)
    "problem", "S", "B", "source", "device", "model", "problem_digest",
    # the cell (problem, planner, seed, mode, budget, settings_hash form its key)
    "planner", "planner_name", "seed", "mode", "budget", "settings_hash",
    # the result, predicted by the simulator (docs/MODEL.md §4); times in seconds
    "schedule", "plan_kind", "caps", "T_pred", "T_start", "evaluations", "wall_time",
    # memory (docs/SCHEDULES.md §4): the cell's cap (spec and bytes), the plan's peaks
    "memory_cap", "memory_cap_bytes", "peak_memory_max", "peak_memory",
    # the equal-microbatch baselines of the same problem, mode and cap: best EDP(M) that fits
    # (empty when no M fits), and the better of the two
    "T_gpipe_edp", "M_gpipe_edp", "T_1f1b_edp", "M_1f1b_edp", "T_best_edp",
    # the fastest schedule torch ships on the problem's stages, one per device, at its best M
    # dividing B that fits (docs/TORCH-SCHEDULES.md §6)
    "T_best_torch", "best_torch_schedule", "M_best_torch",
    # T_baseline / T_pred - 1 (0.1389 = +13.89 %)
    "speedup_vs_gpipe", "speedup_vs_1f1b", "speedup_vs_best_edp", "speedup_vs_best_torch",
    # real execution, joined from results/real/*.csv where the plan was executed
    "T_measured", "model_error", "measured_in",
    # files (relative to the leaderboard's folder)
    "plan_file", "history_file",
    # a failing cell is a row; a planner with no plan that fits the memory cap is not a
    # failure: "infeasible" says why (stage, bytes, cap) and T_pred stays empty
    "error", "infeasible",
    # provenance
    "python", *(f"v_{p.replace('-', '_')}" for p in VERSION_PACKAGES), "git_rev", "timestamp",
)

KEY_COLUMNS = ("problem", "planner", "seed", "mode", "budget", "settings_hash")


def flatten_settings(settings: Mapping[str, Any], prefix: str = PARAM_PREFIX) -> dict[str, Any]:
    """``{"pop": 64, "init": {"edp": 0.5}}`` -> ``{"param_pop": 64, "param_init.edp": 0.5}``."""
    out: dict[str, Any] = {}
    for k, v in settings.items():
        if isinstance(v, Mapping):
            out.update(flatten_settings(v, f"{prefix}{k}."))
        elif isinstance(v, list | tuple):
            out[f"{prefix}{k}"] = ";".join(map(str, v))
        else:
            out[f"{prefix}{k}"] = v
    return out


def row_key(row: Mapping[str, Any]) -> tuple[str, str, int, str, str, str]:
    """The resume key of a row, as :meth:`Cell.key` builds it for a cell."""
    return (str(row["problem"]), str(row["planner"]), int(row["seed"]), str(row["mode"]),
            str(row["budget"]), str(row["settings_hash"]))


def _cell_text(v: Any) -> str:
    if v is None:
        return ""
    if isinstance(v, float):  # numpy's float64 too, whose repr is "np.float64(...)"
        return "" if math.isnan(v) else repr(float(v))
    return str(v)


#: a leaderboard file that cannot be used as one: it names the file, the line and the fault
LeaderboardError = InputError


def scan_rows(path: str | os.PathLike[str]) -> tuple[list[dict[str, str]], list[str]]:
    """The well-formed rows of a leaderboard file and one message per malformed line.

    A row is malformed when it has fewer or more fields than the header (a truncated or
    hand-edited line) or a key column (:data:`KEY_COLUMNS`) that :func:`row_key` cannot read.
    A missing file has no rows; a file without the key columns is a :class:`LeaderboardError`.
    """
    p = Path(path)
    if not p.exists():
        return [], []
    if p.is_dir():
        raise LeaderboardError(f"{str(p)!r} is a folder; expected a leaderboard CSV file")
    if not p.is_file():  # reading a FIFO would wait forever; a device is never rewritten
        raise LeaderboardError(f"{str(p)!r} is not a regular file; expected a leaderboard CSV "
                               "file")
    rows: list[dict[str, str]] = []
    bad: list[str] = []
    try:
        with p.open(newline="", encoding="utf-8") as fh:
            reader = csv.DictReader(fh)
            header = reader.fieldnames or []
            missing = [c for c in KEY_COLUMNS if c not in header]
            if missing:
                raise LeaderboardError(
                    f"{str(p)!r}: not a leaderboard (missing columns {missing}); choose another "
                    "file or folder, or move the file away"
                )
            for row in reader:
                fault = _row_fault(row, len(header))
                if fault:
                    bad.append(f"{p}: line {reader.line_num}: {fault}")
                else:
                    rows.append(row)
    except (UnicodeDecodeError, csv.Error) as exc:
        raise LeaderboardError(f"{str(p)!r}: not a readable CSV file ({exc})") from None
    return rows, bad


def _row_fault(row: dict[Any, Any], width: int) -> str:
    if None in row:
        return f"{width + len(row[None])} fields, the header has {width}"
    if any(v is None for v in row.values()):
        have = sum(v is not None for v in row.values())
        return f"{have} of {width} fields (a truncated row)"
    try:
        row_key(row)
    except ValueError:
        return f"seed {row['seed']!r} is not an integer"
    return ""


def read_rows(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The rows of a leaderboard file (empty when it does not exist); any malformed line is a
    :class:`LeaderboardError`, so nothing rewrites a file it could not fully read."""
    rows, bad = scan_rows(path)
    if bad:
        more = f" (and {len(bad) - 1} more)" if len(bad) > 1 else ""
        raise LeaderboardError(
            f"{bad[0]}{more}; repair or remove the line(s), or choose another --out folder"
        )
    return rows


@contextmanager
def _locked(path: Path) -> Iterator[None]:
    """The leaderboard's lock: :func:`umpipe_bench.filelock.sidecar_lock` on
    ``leaderboard.csv.lock``, held for one read-merge-write."""
    with sidecar_lock(path):
        yield


class Leaderboard:
    """The rows of one leaderboard file, kept in memory and written whole after each change.

    Several processes may write one file at once (``bench --shard 0/2`` and ``1/2`` into one
    ``--out``): every change re-reads the file under a lock, merges, and rewrites it, so no
    writer loses another's rows.
    """

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        self.rows: list[dict[str, Any]] = read_rows(self.path)

    def done(
        self, digests: Mapping[str, str | None], *, with_errors: bool = True
    ) -> set[tuple[str, str, int, str, str, str]]:
        """Keys of finished cells: rows computed on the problem version ``digests[problem]``
        (error rows count unless ``with_errors`` is False)."""
        return {row_key(r) for r in self.rows
                if (with_errors or not r.get("error"))
                and r.get("problem_digest") == digests.get(str(r["problem"]))}

    def add(self, row: Mapping[str, Any]) -> None:
        """Add or replace the row with the same key, merged into the file's current rows
        under the lock, then rewrite the file atomically."""
        self.merge([row])

    def merge(self, rows: Sequence[Mapping[str, Any]]) -> None:
        """Replace or add ``rows`` (by key) in the file as it is now, under the lock."""
        keys = {row_key(r) for r in rows}
        with _locked(self.path):
            current = read_rows(self.path)
            self.rows = [r for r in current if row_key(r) not in keys]
            self.rows.extend(dict(r) for r in rows)
            self._write()

    def columns(self) -> list[str]:
        params = sorted({c for r in self.rows for c in r if c.startswith(PARAM_PREFIX)})
        extra = sorted({c for r in self.rows for c in r} - set(COLUMNS) - set(params))
        return [*COLUMNS, *extra, *params]

    def write(self) -> None:
        """Rewrite the file from the rows in memory (e.g. after editing their columns)."""
        with _locked(self.path):
            self._write()

    def _write(self) -> None:
        buf = io.StringIO()
        w = csv.DictWriter(buf, fieldnames=self.columns(), lineterminator="\n")
        w.writeheader()
        for r in self.rows:
            w.writerow({k: _cell_text(v) for k, v in r.items()})
        atomic_write_text(self.path, buf.getvalue())

    def __len__(self) -> int:
        return len(self.rows)
