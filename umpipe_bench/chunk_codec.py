"""The codec between chunk plans and the arrays a compiled evaluator reads
(docs/CHUNK-SCHEDULES.md §8).

A population of chunk plans shares a :class:`ChunkSpace`: the devices ``D``, the layout and
the layer count of every chunk (so the chunk problem), the batch ``B``, the memory mode and
whether the backward is split. What varies per individual is a :class:`ChunkGenomes` row:

* ``fwd`` ``[C, B-1]`` uint8: the forward partition ``P[c]`` of every chunk as cut bits
  (:mod:`umpipe_bench.codec`: bit ``i`` set when a microbatch ends after sample ``i+1``);
* ``bwd`` ``[C, B-1]``: the backward partition ``Q[c]``; in stash mode the same array as
  ``fwd`` (``Q = P``, not read);
* ``wgt`` ``[C, B-1]`` (read only with ``split``): the weight-gradient partition ``R[c]`` as a
  *mask* over ``Q[c]``'s cuts: ``R[c]`` cuts after sample ``i+1`` when both ``bwd`` and
  ``wgt`` have bit ``i``. Every mask is a coarsening of ``Q[c]`` (no repair), all ones is
  ``R = Q``, and a mask keeps its meaning when a crossover changes ``Q``;
* ``caps`` ``[D]`` int64: the samples a device may hold between forward and backward
  (``1..v B``; ``v B``: no cap); ``w_caps`` ``[D]``: between ``I`` and ``W`` (``0..v B``; ``v B``:
  no cap);
* ``group`` ``[]`` int64: the samples of one interleaving round (``1..B``; ``B``: one round);
* ``fwd_lag``, ``bwd_lag`` ``[C]`` int64: the chunks' lags in samples (``>= 0``).

Every row within those bounds decodes to a valid :class:`~umpipe_bench.chunkplan.ChunkPlan`
and every plan of the space encodes. Values the rule cannot tell apart share one *canonical*
form (:meth:`ChunkSpace.canonical`): a cap of ``v B`` or more holds every sample a device has
and is no cap (all of them: ``caps`` None), likewise ``w_caps``; ``group`` ``B`` is one round
(None); lags of zero are None; mask bits where ``Q`` does not cut are zero. So
``decode(encode(plan)) == canonical(plan)`` and a canonical row survives
``encode(decode(row))`` bit for bit.

A flat integer genome (:meth:`ChunkSpace.to_flat`, :meth:`ChunkSpace.from_flat`) lays the
fields end to end for outside optimizers, with bounds :attr:`ChunkSpace.lower` and
:attr:`ChunkSpace.upper` (lags up to ``D B``, which covers the V shape's lags).

This module imports no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from .chunkplan import ChunkPlan, ChunkPlanError
from .codec import bits_to_sizes, partitions_to_bits
from .layout import Layout, chunk_devices, device_chunks

__all__ = ["ChunkGenomes", "ChunkSpace"]


@dataclass(frozen=True)
class ChunkGenomes:
    """A batch of ``N`` chunk genomes (module docstring): uint8 ``fwd``, ``bwd``, ``wgt``
    ``[N, C, B-1]``, int64 ``caps``, ``w_caps`` ``[N, D]``, ``group`` ``[N]``, ``fwd_lag``,
    ``bwd_lag`` ``[N, C]``. In stash mode ``bwd`` may be the same array as ``fwd``."""

    fwd: np.ndarray
    bwd: np.ndarray
    wgt: np.ndarray
    caps: np.ndarray
    w_caps: np.ndarray
    group: np.ndarray
    fwd_lag: np.ndarray
    bwd_lag: np.ndarray

    _FIELDS = ("fwd", "bwd", "wgt", "caps", "w_caps", "group", "fwd_lag", "bwd_lag")

    def __len__(self) -> int:
        return int(self.fwd.shape[0])

    def rows(self, a: int, b: int) -> ChunkGenomes:
        """Genomes ``a..b-1`` as a batch (views, no copy)."""
        return ChunkGenomes(*(getattr(self, f)[a:b] for f in self._FIELDS))

    def row(self, i: int) -> ChunkGenomes:
        return self.rows(i, i + 1)

    def copy(self) -> ChunkGenomes:
        out = {f: getattr(self, f).copy() for f in self._FIELDS}
        if self.bwd is self.fwd:
            out["bwd"] = out["fwd"]
        return ChunkGenomes(**out)

    @classmethod
    def concat(cls, parts: Sequence[ChunkGenomes]) -> ChunkGenomes:
        return cls(*(np.concatenate([getattr(p, f) for p in parts]) for f in cls._FIELDS))


@dataclass(frozen=True)
class ChunkSpace:
    """What a population of chunk plans shares (module docstring)."""

    D: int
    layout: str
    layers: tuple[int, ...]
    B: int
    mode: str = "stash"
    split: bool = False

    def __post_init__(self) -> None:
        object.__setattr__(self, "layers", tuple(int(n) for n in self.layers))
        Layout(self.layout, self.D, self.layers)  # validates the layout against the counts
        if self.mode not in ("stash", "recompute"):
            raise ChunkPlanError(f"mode must be 'stash' or 'recompute', got {self.mode!r}")
        if not isinstance(self.B, int) or self.B < 1:
            raise ChunkPlanError(f"B must be an integer >= 1, got {self.B!r}")

    @classmethod
    def of(cls, plan: ChunkPlan) -> ChunkSpace:
        """The space a plan lies in."""
        return cls(plan.D, plan.layout, plan.layers, plan.B, plan.mode, plan.split)

    # ------------------------------------------------------------------ shape
    @property
    def C(self) -> int:
        return len(self.layers)

    @property
    def v(self) -> int:
        return self.C // self.D

    @property
    def devices(self) -> tuple[int, ...]:
        return chunk_devices(self.layout, self.D, self.v)

    @property
    def device_chunks(self) -> tuple[tuple[int, ...], ...]:
        return device_chunks(self.layout, self.D, self.v)

    @property
    def no_cap(self) -> int:
        """The cap that holds every sample of a device's chunks: ``v B``."""
        return self.v * self.B

    @property
    def max_lag(self) -> int:
        """The flat genome's bound on lags: ``D B``."""
        return self.D * self.B

    def _check(self, plan: ChunkPlan) -> None:
        if ChunkSpace.of(plan) != self:
            raise ChunkPlanError(f"chunk plan {plan.describe()} (D = {plan.D}, layers "
                                 f"{list(plan.layers)}, B = {plan.B}) is not in the space "
                                 f"{self}")

    # ------------------------------------------------------------------ plans <-> rows
    def canonical(self, plan: ChunkPlan) -> ChunkPlan:
        """The plan with the canonical form of every field the rule cannot tell apart
        (module docstring); its lists and timeline are the plan's."""
        self._check(plan)
        K = self.no_cap

        def caps(x: tuple[int, ...] | None) -> tuple[int, ...] | None:
            if x is None or min(x) >= K:
                return None
            return tuple(min(k, K) for k in x)

        def lag(x: tuple[int, ...] | None) -> tuple[int, ...] | None:
            return None if x is None or not any(x) else x

        return plan.replace(
            caps=caps(plan.caps), w_caps=caps(plan.w_caps) if self.split else None,
            group=None if plan.group is None or plan.group >= self.B else plan.group,
            fwd_lag=lag(plan.fwd_lag), bwd_lag=lag(plan.bwd_lag))

    def encode(self, plans: Sequence[ChunkPlan]) -> ChunkGenomes:
        """Plans of this space -> a batch (in stash mode ``bwd`` is ``fwd``)."""
        N, C, D, B = len(plans), self.C, self.D, self.B
        fwd = np.zeros((N, C, B - 1), np.uint8)
        bwd = fwd if self.mode == "stash" else np.zeros((N, C, B - 1), np.uint8)
        wgt = np.zeros((N, C, B - 1), np.uint8)
        caps = np.full((N, D), self.no_cap, np.int64)
        w_caps = np.full((N, D), self.no_cap, np.int64)
        group = np.full(N, B, np.int64)
        lags = np.zeros((2, N, C), np.int64)
        for n, plan in enumerate(plans):
            self._check(plan)
            fwd[n] = partitions_to_bits(plan.fwd, B)
            if bwd is not fwd:
                bwd[n] = partitions_to_bits(plan.bwd, B)
            if self.split and plan.wgt is not None:
                wgt[n] = partitions_to_bits(plan.wgt, B)
            if plan.caps is not None:
                caps[n] = np.minimum(plan.caps, self.no_cap)
            if self.split and plan.w_caps is not None:
                w_caps[n] = np.minimum(plan.w_caps, self.no_cap)
            if plan.group is not None:
                group[n] = plan.group
            for k, x in enumerate((plan.fwd_lag, plan.bwd_lag)):
                if x is not None:
                    lags[k, n] = x
        return ChunkGenomes(fwd, bwd, wgt, caps, w_caps, group, lags[0], lags[1])

    def decode(self, genomes: ChunkGenomes, i: int = 0) -> ChunkPlan:
        """Row ``i`` -> its canonical :class:`ChunkPlan`."""
        C, K = self.C, self.no_cap
        f = genomes.fwd[i]
        b = f if self.mode == "stash" else genomes.bwd[i]
        P = tuple(bits_to_sizes(f[c]) for c in range(C))
        Q = P if self.mode == "stash" else tuple(bits_to_sizes(b[c]) for c in range(C))
        R = None
        if self.split:
            mask = (np.asarray(b) != 0) & (np.asarray(genomes.wgt[i]) != 0)
            R = tuple(bits_to_sizes(mask[c]) for c in range(C))

        def caps(x: np.ndarray) -> tuple[int, ...] | None:
            x = np.minimum(np.asarray(x, np.int64), K)
            return None if x.min() >= K else tuple(int(k) for k in x)

        def lag(x: np.ndarray) -> tuple[int, ...] | None:
            return tuple(int(k) for k in x) if np.any(x) else None

        g = int(genomes.group[i])
        return ChunkPlan(D=self.D, layout=self.layout, layers=self.layers, fwd=P, bwd=Q,
                         mode=self.mode, split=self.split, wgt=R, caps=caps(genomes.caps[i]),
                         w_caps=caps(genomes.w_caps[i]) if self.split else None,
                         group=None if g >= self.B else g, fwd_lag=lag(genomes.fwd_lag[i]),
                         bwd_lag=lag(genomes.bwd_lag[i]))

    def check(self, genomes: ChunkGenomes) -> ChunkGenomes:
        """The batch as contiguous arrays of the kernel's dtypes; a wrong shape or a value
        outside its bounds (caps ``>= 1``, ``w_caps``, lags ``>= 0``, group ``1..B``) is a
        ValueError naming the field. Caps above ``v B`` are allowed (they are no cap)."""
        N, C, D, L = len(genomes), self.C, self.D, self.B - 1
        shapes = {"fwd": (N, C, L), "bwd": (N, C, L), "wgt": (N, C, L), "caps": (N, D),
                  "w_caps": (N, D), "group": (N,), "fwd_lag": (N, C), "bwd_lag": (N, C)}
        out = {}
        for name, shape in shapes.items():
            x = np.asarray(getattr(genomes, name))
            if name == "bwd" and self.mode == "stash":
                out[name] = out["fwd"]
                continue
            if name == "wgt" and not self.split:
                out[name] = np.ones((N, C, L), np.uint8)
                continue
            if x.shape != shape:
                raise ValueError(f"chunk genomes field {name!r}: expected shape {shape}, got "
                                 f"{x.shape}")
            out[name] = np.require(x, np.uint8 if name in ("fwd", "bwd", "wgt") else np.int64,
                                   ("C", "W"))  # contiguous, writeable: one kernel signature
        for name, lo, hi in (("caps", 1, None), ("w_caps", 0, None), ("group", 1, self.B),
                             ("fwd_lag", 0, None), ("bwd_lag", 0, None)):
            x = out[name]
            if x.size and (x.min() < lo or (hi is not None and x.max() > hi)):
                raise ValueError(f"chunk genomes field {name!r}: values must be >= {lo}"
                                 + (f" and <= {hi}" if hi is not None else ""))
        return ChunkGenomes(**out)

    # ------------------------------------------------------------------ random rows
    def random(self, rng: np.random.Generator, n: int) -> ChunkGenomes:
        """``n`` random rows: per chunk and direction a microbatch count log-uniform in
        ``[1, B]`` and cut bits of that density (a plan one would run, not ~2-sample
        microbatches), a uniform ``W`` mask, caps uniform in ``1..v B``, ``w_caps`` in
        ``0..v B``, group in ``1..B``, lags in ``0..B``."""
        C, D, B = self.C, self.D, self.B

        def bits() -> np.ndarray:
            M = np.exp(rng.uniform(0.0, np.log(B), size=(n, C, 1)))
            p = np.clip((M - 1.0) / max(B - 1, 1), 0.0, 1.0)
            return (rng.random((n, C, B - 1)) < p).astype(np.uint8)

        fwd = bits()
        K = self.no_cap
        return ChunkGenomes(
            fwd=fwd, bwd=fwd if self.mode == "stash" else bits(),
            wgt=rng.integers(0, 2, size=(n, C, B - 1)).astype(np.uint8),
            caps=rng.integers(1, K + 1, size=(n, D)), w_caps=rng.integers(0, K + 1, size=(n, D)),
            group=rng.integers(1, B + 1, size=n), fwd_lag=rng.integers(0, B + 1, size=(n, C)),
            bwd_lag=rng.integers(0, B + 1, size=(n, C)))

    # ------------------------------------------------------------------ flat genomes
    def _flat_fields(self) -> list[tuple[str, int, int, int]]:
        """(field, genes, lower, upper) in the flat genome's order."""
        C, D, L, K = self.C, self.D, self.B - 1, self.no_cap
        out = [("fwd", C * L, 0, 1)]
        if self.mode == "recompute":
            out.append(("bwd", C * L, 0, 1))
        if self.split:
            out.append(("wgt", C * L, 0, 1))
        out.append(("caps", D, 1, K))
        if self.split:
            out.append(("w_caps", D, 0, K))
        out += [("group", 1, 1, self.B), ("fwd_lag", C, 0, self.max_lag),
                ("bwd_lag", C, 0, self.max_lag)]
        return out

    @property
    def dimension(self) -> int:
        return sum(n for _, n, _, _ in self._flat_fields())

    @property
    def lower(self) -> np.ndarray:
        return np.concatenate([np.full(n, lo, np.int64) for _, n, lo, _ in self._flat_fields()])

    @property
    def upper(self) -> np.ndarray:
        return np.concatenate([np.full(n, hi, np.int64) for _, n, _, hi in self._flat_fields()])

    def to_flat(self, genomes: ChunkGenomes) -> np.ndarray:
        """A batch -> flat genomes ``[N, dimension]`` (caps clipped to ``v B``)."""
        N = len(genomes)
        cols = []
        for name, n, _, hi in self._flat_fields():
            x = np.asarray(getattr(genomes, name), np.int64).reshape(N, n)
            cols.append(np.minimum(x, hi) if name in ("caps", "w_caps") else x)
        return np.concatenate(cols, axis=1)

    def from_flat(self, x: np.ndarray) -> ChunkGenomes:
        """Flat genomes ``[N, dimension]`` (or one ``[dimension]``) -> a batch; genes are
        rounded to integers and must lie within :attr:`lower` .. :attr:`upper`."""
        x = np.asarray(x)
        if x.ndim == 1:
            x = x[None]
        if x.ndim != 2 or x.shape[1] != self.dimension:
            raise ValueError(f"chunk genomes: expected shape [N, {self.dimension}], got "
                             f"{x.shape}")
        xi = np.rint(x).astype(np.int64)
        if np.any(xi < self.lower) or np.any(xi > self.upper):
            raise ValueError("chunk genomes: a gene is outside its bounds")
        N, C, D, L = xi.shape[0], self.C, self.D, self.B - 1
        shapes = {"fwd": (N, C, L), "bwd": (N, C, L), "wgt": (N, C, L), "caps": (N, D),
                  "w_caps": (N, D), "group": (N,), "fwd_lag": (N, C), "bwd_lag": (N, C)}
        out: dict[str, np.ndarray] = {}
        a = 0
        for name, n, _, _ in self._flat_fields():
            out[name] = xi[:, a:a + n].reshape(shapes[name])
            a += n
        for name in ("fwd", "bwd", "wgt"):
            if name in out:
                out[name] = out[name].astype(np.uint8)
        out.setdefault("bwd", out["fwd"])
        out.setdefault("wgt", np.ones((N, C, L), np.uint8))
        out.setdefault("w_caps", np.full((N, D), self.no_cap, np.int64))
        return ChunkGenomes(**out)
