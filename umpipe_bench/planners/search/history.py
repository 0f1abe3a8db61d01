"""The typed history of a search: one record per setup and per generation (evaluations so
far, wall time, best T so far), which plots and the leaderboard read without guessing keys.

Kept apart from :mod:`.loop` so that :mod:`.base` (every planner's ``plan``) can wrap any
planner's history without importing the loop that imports it.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = ["HISTORY_FIELDS", "THIN_SECONDS", "History", "Record", "thinned"]

#: The columns of every history record, in order.
HISTORY_FIELDS = ("generation", "evaluations", "wall_time", "best")


@dataclass(frozen=True)
class Record:
    """One history row. ``dict(record)`` gives the :data:`HISTORY_FIELDS` columns."""

    generation: int
    evaluations: int
    wall_time: float
    best: float

    def keys(self) -> tuple[str, ...]:
        return HISTORY_FIELDS

    def __getitem__(self, key: str) -> Any:
        if key not in HISTORY_FIELDS:
            raise KeyError(key)
        return getattr(self, key)


@dataclass
class History:
    """The typed history of a run: :class:`Record` rows, plus planner-specific ``extra``
    (e.g. DGAP's DEAP ``Logbook`` under ``"logbook"``)."""

    rows: list[Record] = field(default_factory=list)
    extra: dict[str, Any] = field(default_factory=dict)

    def append(self, generation: int, evaluations: int, wall_time: float, best: float) -> None:
        self.rows.append(Record(int(generation), int(evaluations), float(wall_time),
                                float(best)))

    def __iter__(self) -> Iterator[Record]:
        return iter(self.rows)

    def __len__(self) -> int:
        return len(self.rows)

    def __getitem__(self, i: int) -> Record:
        return self.rows[i]

    def column(self, name: str) -> np.ndarray:
        """One field over all rows (``name`` in :data:`HISTORY_FIELDS`)."""
        if name not in HISTORY_FIELDS:
            raise KeyError(f"history has no field {name!r}; fields: {', '.join(HISTORY_FIELDS)}")
        return np.array([getattr(r, name) for r in self.rows])

    def records(self) -> list[dict[str, Any]]:
        return [dict(r) for r in self.rows]

    @classmethod
    def from_result(cls, history: Any, evaluations: int, wall_time: float,
                    best: float) -> History:
        """A typed history for a planner that did not use the loop.

        Progress records of a third-party or older planner (dicts with ``evals``/``nevals``
        and ``best``/``value``, optionally ``time``) become one record each; anything else (a
        one-shot construction such as EDP or greedy) becomes one record of the whole run, its
        own records kept in ``extra["records"]``.
        """
        if isinstance(history, History):
            return history
        rows = [dict(r) for r in history] if history is not None else []
        h = cls()
        ekey = next((k for k in ("nevals", "evals") if rows and k in rows[0]), None)
        bkey = next((k for k in ("best", "value") if rows and k in rows[0]), None)
        if ekey and bkey and all(ekey in r and bkey in r for r in rows):
            low = float("inf")
            for i, r in enumerate(rows):
                low = min(low, float(r[bkey]))
                h.append(i, int(r[ekey]), float(r.get("time", 0.0)), low)
            return h
        h.append(0, evaluations, wall_time, best)
        if rows:
            h.extra["records"] = rows
        return h


#: :func:`thinned` keeps the first record of every window of this many seconds.
THIN_SECONDS = 0.05


def thinned(gen: np.ndarray, ev: np.ndarray, t: np.ndarray, best: np.ndarray) -> History:
    """A history of these columns (best: the best so far) with the records that tell
    something: the first and the last, every one that improved the best T, and the first of
    every :data:`THIN_SECONDS` window (so the evaluations over time stay drawn). A run's
    searches make tens of thousands of generations a minute; building a record of each, after
    the run, took most of a second."""
    n = len(t)
    keep = np.zeros(n, bool)
    if n:
        keep[0] = keep[-1] = True
        keep[1:] |= best[1:] < best[:-1]
        window = np.floor(t / THIN_SECONDS)
        keep[1:] |= window[1:] != window[:-1]
    out = History()
    out.rows = [Record(g, e, w, b) for g, e, w, b in zip(
        gen[keep].tolist(), ev[keep].tolist(), t[keep].tolist(), best[keep].tolist(),
        strict=True)]
    return out
