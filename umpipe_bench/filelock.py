"""One exclusive lock on a ``<file>.lock`` sidecar, shared by every writer that must not
interleave with another process (the leaderboard's read-merge-write, opening a new SQLite
study). ``flock`` is released when the process dies, so a killed writer never leaves it stuck.
"""

from __future__ import annotations

import fcntl
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

__all__ = ["sidecar_lock"]


@contextmanager
def sidecar_lock(path: str | Path) -> Iterator[None]:
    """Hold an exclusive ``flock`` on ``<path>.lock``, created beside the file ``path`` leads
    to (links followed: every writer of one file, whatever link it names, takes one lock)."""
    path = Path(os.path.realpath(path))
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path.with_name(path.name + ".lock"), "a") as fh:
        fcntl.flock(fh.fileno(), fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh.fileno(), fcntl.LOCK_UN)
