"""Variation of chunk genomes for the chunk-plan planner
(:mod:`..algorithms.chunk_search`, docs/CHUNK-SCHEDULES.md §9): tournament selection, crossover
per chunk row of each chromosome (forward, backward, weight-gradient mask), per device gene and
per chunk lag, and mutation; row helpers (take, unique, elites, which rows changed).

Every function draws from the ``rng`` it is given, so a seeded run is reproducible.
"""

from __future__ import annotations

import dataclasses
from typing import Any

import numpy as np

from ...chunk_codec import ChunkGenomes, ChunkSpace

__all__ = ["crossover", "differs", "elite_rows", "mutate", "select", "stash_tied", "take",
           "unique"]


def select(rng: np.random.Generator, T: np.ndarray, n: int, k: int) -> np.ndarray:
    """``n`` tournament winners (size ``k``, lowest T) as row indices."""
    idx = rng.integers(0, len(T), size=(n, k))
    return idx[np.arange(n), np.argmin(T[idx], axis=1)]


def crossover(rng: np.random.Generator, space: ChunkSpace, kids: ChunkGenomes,
              cxpb: float) -> ChunkGenomes:
    """Pairs ``(0, 1), (2, 3), ...`` mate with probability ``cxpb``: each chunk row of each
    chromosome, each device's cap and ``w_cap``, each chunk's lags and the group come from
    either parent (uniform, per row)."""
    n = len(kids)
    npair = n // 2
    if npair == 0:
        return kids
    g = kids.copy()
    mate = rng.random(npair) < cxpb
    a = np.flatnonzero(mate) * 2
    if len(a) == 0:
        return g
    b = a + 1
    C, D = space.C, space.D
    fields = ["fwd", *(["bwd"] if space.mode == "recompute" else []),
              *(["wgt", "w_caps"] if space.split else []), "caps", "fwd_lag", "bwd_lag",
              "group"]
    for name in fields:
        x = getattr(g, name)
        width = {"caps": D, "w_caps": D, "group": 0}.get(name, C)
        if width:
            swap = rng.random((len(a), width)) < 0.5
            xa, xb = x[a].copy(), x[b].copy()
            if x.ndim == 3:
                m = swap[:, :, None]
            else:
                m = swap
            x[a] = np.where(m, xb, xa)
            x[b] = np.where(m, xa, xb)
        else:
            swap = rng.random(len(a)) < 0.5
            xa, xb = x[a].copy(), x[b].copy()
            x[a] = np.where(swap, xb, xa)
            x[b] = np.where(swap, xa, xb)
    return g


def mutate(rng: np.random.Generator, s: dict[str, Any], space: ChunkSpace, kids: ChunkGenomes,
           which: np.ndarray, strength: float = 1.0) -> ChunkGenomes:
    """Mutate the rows where ``which`` holds (settings ``s``: flip_rate, shift_rate,
    cap_rate): cut bits flipped, boundaries shifted by a sample, one chunk's row copied to
    another; caps, ``w_caps``, the group and lags redrawn near the old value, anywhere, or to
    none (docs/CHUNK-SCHEDULES.md §9)."""
    g = kids.copy()
    rows = np.flatnonzero(which)
    if len(rows) == 0:
        return g
    n, C, D, B = len(rows), space.C, space.D, space.B
    L = B - 1
    K = space.no_cap
    chroms = ["fwd"] + (["bwd"] if space.mode == "recompute" else []) \
        + (["wgt"] if space.split else [])
    if L > 0:
        for name in chroms:
            x = getattr(g, name)
            sub = x[rows]
            flip = rng.random(sub.shape) < min(1.0, strength * float(s["flip_rate"])
                                               / (C * L))
            sub ^= flip.astype(np.uint8)
            # shifts: swap the bits at i and i+1 of one row
            nshift = rng.poisson(strength * float(s["shift_rate"]), size=n)
            for r in np.flatnonzero(nshift):
                for _ in range(int(nshift[r])):
                    c = int(rng.integers(0, C))
                    if L >= 2:
                        i = int(rng.integers(0, L - 1))
                        sub[r, c, i], sub[r, c, i + 1] = sub[r, c, i + 1], sub[r, c, i]
            # copy one chunk's row to another
            cp = rng.random(n) < 0.1 * strength
            for r in np.flatnonzero(cp):
                c1, c2 = rng.integers(0, C, size=2)
                sub[r, c2] = sub[r, c1]
            x[rows] = sub
    # caps and w_caps: near the old value, anywhere, or no cap
    for name, lo in (("caps", 1), ("w_caps", 0)) if space.split else (("caps", 1),):
        x = getattr(g, name)
        sub = x[rows].copy()
        hit = rng.random((n, D)) < min(1.0, strength * float(s["cap_rate"]) / D)
        u = rng.random((n, D))
        near = np.rint(np.maximum(sub, 1) * np.exp(rng.uniform(-0.7, 0.7, (n, D)))
                       + rng.integers(-1, 2, (n, D)))
        anywhere = rng.integers(lo, K + 1, (n, D))
        new = np.where(u < 0.1, K, np.where(u < 0.6, near, anywhere))
        new = np.clip(new, lo, K).astype(np.int64)
        x[rows] = np.where(hit, new, sub)
    # the group: near, anywhere, one round
    gr = g.group[rows].copy()
    hit = rng.random(n) < 0.15 * strength
    u = rng.random(n)
    near = np.rint(gr * np.exp(rng.uniform(-0.7, 0.7, n)))
    new = np.where(u < 0.2, B, np.where(u < 0.6, near, rng.integers(1, B + 1, n)))
    g.group[rows] = np.where(hit, np.clip(new, 1, B), gr).astype(np.int64)
    # lags: per chunk, near, anywhere in 0..B, or none
    for name in ("fwd_lag", "bwd_lag"):
        x = getattr(g, name)
        sub = x[rows].copy()
        hit = rng.random((n, C)) < min(1.0, 0.5 * strength / C)
        u = rng.random((n, C))
        step = rng.integers(1, max(2, B // 4 + 1), (n, C)) * rng.choice([-1, 1], (n, C))
        new = np.where(u < 0.3, 0, np.where(u < 0.7, sub + step,
                                             rng.integers(0, B + 1, (n, C))))
        x[rows] = np.where(hit, np.clip(new, 0, space.max_lag), sub).astype(np.int64)
    return g


def take(g: ChunkGenomes, idx: np.ndarray) -> ChunkGenomes:
    """Rows ``idx`` as a new batch (copies; ``bwd`` stays ``fwd`` when it was)."""
    idx = np.asarray(idx, dtype=np.int64)
    out = {f: getattr(g, f)[idx] for f in ChunkGenomes._FIELDS}
    if g.bwd is g.fwd:
        out["bwd"] = out["fwd"]
    return ChunkGenomes(**out)


def stash_tied(space: ChunkSpace, g: ChunkGenomes) -> ChunkGenomes:
    """In stash mode the backward chromosome is the forward one (the same array)."""
    if space.mode == "stash" and g.bwd is not g.fwd:
        return dataclasses.replace(g, bwd=g.fwd)
    return g


def _keys(g: ChunkGenomes) -> list[bytes]:
    N = len(g)
    parts = [np.ascontiguousarray(getattr(g, f)).reshape(N, -1).view(np.uint8)
             for f in ChunkGenomes._FIELDS]
    flat = np.concatenate(parts, axis=1)
    return [flat[i].tobytes() for i in range(N)]


def unique(g: ChunkGenomes) -> ChunkGenomes:
    """The batch without repeated rows (first kept)."""
    seen: set[bytes] = set()
    keep = []
    for i, k in enumerate(_keys(g)):
        if k not in seen:
            seen.add(k)
            keep.append(i)
    return take(g, np.array(keep, dtype=np.int64))


def elite_rows(g: ChunkGenomes, T: np.ndarray, E: int) -> np.ndarray:
    """The ``E`` best distinct rows (stable order by T); repeats fill in when too few."""
    order = np.argsort(T, kind="stable")
    keys = _keys(g)
    seen: set[bytes] = set()
    out: list[int] = []
    for i in order:
        if keys[i] not in seen:
            seen.add(keys[i])
            out.append(int(i))
            if len(out) == E:
                break
    for i in order:
        if len(out) == E:
            break
        if int(i) not in out:
            out.append(int(i))
    return np.array(out, dtype=np.int64)


def differs(a: ChunkGenomes, b: ChunkGenomes) -> np.ndarray:
    N = len(a)
    out = np.zeros(N, dtype=bool)
    for f in ChunkGenomes._FIELDS:
        x, y = getattr(a, f), getattr(b, f)
        out |= np.any((x != y).reshape(N, -1), axis=1)
    return out
