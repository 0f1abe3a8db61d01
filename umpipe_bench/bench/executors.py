"""Where a matrix's cells run: this process, a local process pool, or a dask cluster.

The runner (:mod:`.runner`) asks an executor for ``(cell, result)`` pairs in completion
order and writes every row itself, so one process owns the leaderboard whatever runs the
cells (no row lost or written twice; docs/ARCHITECTURE.md, "Bench").

On a dask cluster (``umpipe-bench bench --executor dask [--scheduler ADDRESS]``; the ``dask``
extra installs ``dask.distributed``) a worker may be another machine without this one's
disk: it runs the cell into a temporary folder of its own and sends back the result row with
the plan and history files' text, which this process writes under the output folder. Without
a scheduler address a ``LocalCluster`` of ``jobs`` single-threaded worker processes is
started, and closed with the run.
"""

from __future__ import annotations

import os
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

from ..errors import UserInputError
from ..problem import atomic_write_text
from .config import Cell

__all__ = ["EXECUTORS", "dask_results", "run_cell_detached"]

EXECUTORS = ("process", "dask")

#: How long to wait for a ``--scheduler`` to answer.
CONNECT_TIMEOUT = "20s"

RunCell = Callable[[Cell, Path], dict[str, Any]]


def run_cell_detached(cell: Cell, run_cell: RunCell) -> tuple[dict[str, Any], dict[str, str]]:
    """Run ``cell`` into a temporary folder; return its row and ``{relative path: text}`` of
    the files it wrote (plans/, histories/), so they can be written elsewhere."""
    with tempfile.TemporaryDirectory(prefix="umpipe-cell-") as tmp:
        row = run_cell(cell, Path(tmp))
        files = {str(p.relative_to(tmp)): p.read_text(encoding="utf-8")
                 for p in Path(tmp).rglob("*") if p.is_file()}
    return row, files


def _client(scheduler: str | None, jobs: int) -> tuple[Any, Any]:
    try:
        from distributed import Client, LocalCluster
    except ImportError:
        raise UserInputError("--executor dask needs dask.distributed: pip install -e "
                             "'.[dask]'") from None
    if scheduler is None:
        cluster = LocalCluster(n_workers=jobs, threads_per_worker=1, processes=True,
                               dashboard_address=None)
        return Client(cluster), cluster
    try:
        return Client(scheduler, timeout=CONNECT_TIMEOUT), None
    except (OSError, TimeoutError, ValueError) as exc:
        raise UserInputError(f"--scheduler {scheduler!r}: cannot reach a dask scheduler "
                             f"there ({exc})") from None


def _kill_workers(cluster: Any) -> None:
    """SIGKILL the worker processes of a local cluster (its close would give each 4 s)."""
    import signal

    for nanny in list(getattr(cluster, "workers", {}).values()):
        pid = getattr(nanny, "pid", None)
        if pid:
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass


def dask_results(cells: Sequence[Cell], out: Path, jobs: int, scheduler: str | None,
                 run_cell: RunCell) -> Iterator[tuple[Cell, dict[str, Any]]]:
    """``(cell, result)`` in completion order, the cells run by dask workers; their files are
    written here under ``out``. Leaving early cancels the cells not yet finished."""
    from distributed import as_completed

    client, cluster = _client(scheduler, jobs)
    futures: dict[Any, Cell] = {}
    done = False
    try:
        for c in cells:
            f = client.submit(run_cell_detached, c, run_cell, pure=False,
                              key=f"umpipe-cell-{c.slug}-{os.urandom(4).hex()}")
            futures[f] = c
        for f in as_completed(list(futures)):
            row, files = f.result()
            for rel, text in files.items():
                atomic_write_text(out / rel, text)
            yield futures.pop(f), row
        done = True
    finally:
        # ended early (SIGINT/SIGTERM here or in the caller, which then closes this
        # generator, or an error): a local cluster's workers go at once
        if not done and cluster is not None:
            _kill_workers(cluster)
        if futures:
            client.cancel(list(futures))
        client.close()
        if cluster is not None:
            cluster.close()
