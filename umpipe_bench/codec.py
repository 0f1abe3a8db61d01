"""The one codec between plans and the genes searches work on (docs/MODEL.md §2).

A plan gives every stage a forward and a backward composition of the mini-batch of ``B``
samples (ordered positive sizes summing to ``B``). Every encoding in the project reduces to the
few mappings here:

* **cut bits**: a composition of ``B`` is ``B-1`` bits, bit ``i`` set when a microbatch ends
  after sample ``i+1`` (:func:`sizes_to_bits`, :func:`bits_to_sizes`). The map is a bijection
  between ``{0,1}^(B-1)`` and the ``2^(B-1)`` compositions of ``B``, so every bit string is a
  plan and crossover and mutation never need repair. A stage-major ``[S, B-1]`` uint8 array is
  one direction of a plan (:func:`partitions_to_bits`, :func:`bits_to_partitions`); in stash
  mode the backward bits are tied to the forward ones and not read.
* **counts**: a microbatch count ``M`` in ``1..B`` stands for the balanced composition
  (:func:`balanced_sizes`: sizes differing by at most one, larger first, as
  ``torch.tensor_split`` gives); :func:`edp_row` is its cut bits.
* **integer codes**: bit ``j`` of an integer is flat bit ``j`` of an ``[S, B-1]`` chromosome
  (:func:`codes_to_bits`, the exhaustive search's enumeration).
* **caps**: per-stage in-flight caps ``K[s]`` (docs/SCHEDULES.md); a cap of ``B`` or more
  means uncapped, and a plan whose every cap is ``B`` or more is the uncapped plan
  (:func:`genes_to_caps`).
* **flat genomes**: :class:`GenomeLayout` lays forward bits, backward bits (recompute mode
  only) and caps (``capped`` schedule only) end to end, the genome outside optimizers see
  (:mod:`umpipe_bench.api`).

This module knows compositions, not the :class:`~umpipe_bench.plan.Plan` class (plan.py builds
plans from what it decodes: :meth:`~umpipe_bench.plan.Plan.from_bits`); it imports no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

__all__ = [
    "GenomeLayout",
    "balanced_sizes",
    "bits_to_partitions",
    "bits_to_sizes",
    "codes_to_bits",
    "edp_bits",
    "edp_row",
    "genes_to_caps",
    "partitions_to_bits",
    "plan_to_bits",
    "plans_to_bits",
    "sizes_to_bits",
    "sizes_to_row",
]


# ----------------------------------------------------------------------- compositions

def balanced_sizes(B: int, M: int) -> tuple[int, ...]:
    """``B`` split into ``M`` parts differing by at most one, larger first (EDP(M)'s sizes)."""
    if not 1 <= M <= B:
        raise ValueError(f"EDP needs 1 <= M <= B, got M={M}, B={B}")
    q, r = divmod(B, M)
    return tuple([q + 1] * r + [q] * (M - r))


def sizes_to_row(sizes: Sequence[int], B: int) -> np.ndarray:
    """Composition of ``B`` -> cut bits, uint8 ``[B-1]``."""
    row = np.zeros(max(B - 1, 0), dtype=np.uint8)
    row[np.cumsum(sizes[:-1], dtype=np.int64) - 1] = 1
    return row


def sizes_to_bits(sizes: Sequence[int], B: int) -> list[int]:
    """Composition of ``B`` -> ``B-1`` cut bits as a list of ints."""
    return sizes_to_row(sizes, B).tolist()


def bits_to_sizes(bits: Sequence[int] | np.ndarray) -> tuple[int, ...]:
    """``B-1`` cut bits (any nonzero value is a cut) -> composition of ``B``."""
    row = np.asarray(bits)
    ends = np.flatnonzero(row) + 1
    return tuple(np.diff(ends, prepend=0, append=row.size + 1).tolist())


def partitions_to_bits(parts: Sequence[Sequence[int]], B: int) -> np.ndarray:
    """One direction of a plan (a composition per stage) -> uint8 ``[S, B-1]``."""
    out = np.zeros((len(parts), max(B - 1, 0)), dtype=np.uint8)
    for s, sizes in enumerate(parts):
        out[s] = sizes_to_row(sizes, B)
    return out


def bits_to_partitions(bits: Sequence[Sequence[int]] | np.ndarray
                       ) -> tuple[tuple[int, ...], ...]:
    """``[S, B-1]`` cut bits -> one composition per stage."""
    return tuple(bits_to_sizes(row) for row in bits)


def plan_to_bits(plan: Any) -> tuple[np.ndarray, np.ndarray]:
    """A plan -> ``(forward bits, backward bits)``, each uint8 ``[S, B-1]``."""
    return partitions_to_bits(plan.fwd, plan.B), partitions_to_bits(plan.bwd, plan.B)


def plans_to_bits(plans: Sequence[Any]) -> tuple[np.ndarray, np.ndarray]:
    """Several plans -> ``(forward bits, backward bits)``, each ``[N, S, B-1]``."""
    pairs = [plan_to_bits(p) for p in plans]
    return np.stack([f for f, _ in pairs]), np.stack([b for _, b in pairs])


# ----------------------------------------------------------------------- counts and codes

def edp_row(B: int, M: int) -> np.ndarray:
    """The cut bits ``[B-1]`` of the balanced split of ``B`` into ``M`` parts."""
    return sizes_to_row(balanced_sizes(B, M), B)


def edp_bits(S: int, B: int, M: int) -> np.ndarray:
    """EDP(M) as cut bits ``[S, B-1]``: every stage the balanced split into ``M`` parts."""
    return np.repeat(edp_row(B, M)[None], S, axis=0)


def codes_to_bits(codes: np.ndarray, S: int, L: int) -> np.ndarray:
    """Integer codes -> cut bits ``[n, S, L]`` (bit ``j`` of the code = flat bit ``j``)."""
    shifts = np.arange(S * L, dtype=np.int64)
    return ((np.asarray(codes, dtype=np.int64)[:, None] >> shifts) & 1).astype(
        np.uint8).reshape(-1, S, L)


# ----------------------------------------------------------------------- caps

def genes_to_caps(genes: Sequence[int] | np.ndarray | None, B: int
                  ) -> tuple[int, ...] | None:
    """Cap genes ``[S]`` -> a plan's caps: each at most ``B``; None (uncapped, the GPipe
    lists) when every gene is ``B`` or more (docs/SCHEDULES.md)."""
    if genes is None:
        return None
    caps = np.minimum(np.asarray(genes, dtype=np.int64), B)
    return None if caps.min() >= B else tuple(caps.tolist())


# ----------------------------------------------------------------------- flat genomes

@dataclass(frozen=True)
class GenomeLayout:
    """A flat integer genome: ``S·(B−1)`` forward cut bits, then as many backward bits in
    recompute mode (stash mode ties them to the forward ones), then one cap per stage in
    ``1..B`` under the ``capped`` schedule (``B``: uncapped). Every genome within the bounds
    decodes to a valid plan."""

    S: int
    B: int
    mode: str
    schedule: str

    @property
    def family(self) -> str:
        """The older name of :attr:`schedule`."""
        return self.schedule

    @property
    def n_bits(self) -> int:
        """Cut bits: ``S·(B−1)``, twice in recompute mode."""
        return self.S * (self.B - 1) * (2 if self.mode == "recompute" else 1)

    @property
    def n_caps(self) -> int:
        return self.S if self.schedule == "capped" else 0

    @property
    def dimension(self) -> int:
        return self.n_bits + self.n_caps

    @property
    def lower(self) -> np.ndarray:
        return np.concatenate([np.zeros(self.n_bits, np.int64), np.ones(self.n_caps, np.int64)])

    @property
    def upper(self) -> np.ndarray:
        return np.concatenate([np.ones(self.n_bits, np.int64),
                               np.full(self.n_caps, self.B, np.int64)])

    def split(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """``(fbits [N,S,B-1], bbits [N,S,B-1], caps [N,S])`` of a batch ``[N, D]`` (or of one
        genome ``[D]``); genes are rounded to integers and must lie within the bounds."""
        x = np.asarray(x)
        if x.ndim == 1:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != self.dimension:
            raise ValueError(f"genomes: expected shape [N, {self.dimension}] (or [{self.dimension}]"
                             f") for S={self.S}, B={self.B}, {self.mode}, {self.schedule}; got "
                             f"{x.shape}")
        xi = np.rint(x).astype(np.int64)
        if np.any(xi < self.lower) or np.any(xi > self.upper):
            raise ValueError("genomes: a gene is outside its bounds (bits 0..1, caps 1..B)")
        N, n = xi.shape[0], self.S * (self.B - 1)
        f = xi[:, :n].reshape(N, self.S, self.B - 1).astype(np.uint8)
        b = (xi[:, n:2 * n].reshape(N, self.S, self.B - 1).astype(np.uint8)
             if self.mode == "recompute" else f)
        caps = (xi[:, self.n_bits:] if self.n_caps else np.full((N, self.S), self.B, np.int64))
        return f, b, np.ascontiguousarray(caps)

    def join(self, fbits: np.ndarray, bbits: np.ndarray | None = None,
             caps: Sequence[int] | np.ndarray | None = None) -> np.ndarray:
        """The genome ``[D]`` of one plan's bits ``[S, B-1]`` (and caps ``[S]``; None: ``B``)."""
        parts = [np.asarray(fbits, np.int64).ravel()]
        if self.mode == "recompute":
            parts.append(np.asarray(fbits if bbits is None else bbits, np.int64).ravel())
        if self.n_caps:
            parts.append(np.full(self.S, self.B, np.int64) if caps is None
                         else np.asarray(caps, np.int64).ravel())
        return np.concatenate(parts)
