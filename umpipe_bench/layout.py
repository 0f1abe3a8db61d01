"""Layers on devices: contiguous layer groups (chunks) and where they run (docs/MODEL.md §1d).

A problem whose stages are single layers (the profiler's one-layer-per-stage files) is the
per-layer data. A *partition* cuts its ``L`` layers into ``C`` contiguous chunks (layer counts
``n_0 + ... + n_{C-1} = L``); a *layout* places the chunks on ``D`` devices:

* ``one``: one chunk per device (``C = D``), chunk ``c`` on device ``c`` (today's problems);
* ``loop``: ``v`` chunks per device in loop order (``C = v * D``), chunk ``c`` on device
  ``c mod D`` (torch's interleaved 1F1B, looped BFS, interleaved zero bubble);
* ``v``: the V shape (``C = 2 * D``), device ``d`` holds chunks ``d`` and ``2D - 1 - d``
  (torch's ZBV zero bubble and DualPipeV).

A chunk's costs are *derived* from its layers' (:func:`group_layers`): at every measured size,
each time (forward, backward, recompute backward, the split backward passes, optimizer) is the
sum of its layers' times (the first chunk's split backward is all weight-gradient pass, as in
torch: :func:`_split_totals`), memory figures add up (the chunk's input is its first layer's), and
the link after a chunk is the link after its last layer. Consecutive chunks on one device
exchange nothing over a link (the simulators charge no transfer between them). How far the sum
is from a direct profile of the grouped layers: results/real/chunk-derivation.md.

This module imports no torch.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from itertools import accumulate

from .errors import InputError
from .problem import SPLIT_KINDS, Problem, StageCosts, StageMemory

__all__ = [
    "LAYOUT_KINDS",
    "Layout",
    "LayoutError",
    "balanced_counts",
    "chunk_devices",
    "chunk_memory",
    "device_chunks",
    "group_layers",
]

LAYOUT_KINDS = ("one", "loop", "v")


#: a partition or layout that does not fit the problem (the message names the field)
LayoutError = InputError


def chunk_devices(kind: str, D: int, v: int | None = None) -> tuple[int, ...]:
    """The device of every chunk ``c = 0..C-1`` of a layout (see the module docstring); the
    same mapping torch's ``generate_stage_to_rank_mapping`` makes (``style="loop"`` / ``"v"``).

    ``v``: chunks per device; ``one`` needs 1 and ``v`` needs 2 (None: that count, and 1 for
    ``loop``)."""
    if kind not in LAYOUT_KINDS:
        raise LayoutError(f"unknown layout kind {kind!r}; expected one of "
                          f"{', '.join(LAYOUT_KINDS)}")
    if isinstance(D, bool) or not isinstance(D, int) or D < 1:
        raise LayoutError(f"devices D must be a positive integer, got {D!r}")
    if v is None:
        v = 2 if kind == "v" else 1
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise LayoutError(f"chunks per device v must be a positive integer, got {v!r}")
    if kind == "one" and v != 1:
        raise LayoutError(f"v: layout 'one' holds one chunk per device, got v = {v}")
    if kind == "v" and v != 2:
        raise LayoutError(f"v: layout 'v' holds two chunks per device, got v = {v}")
    if kind == "v":
        return tuple(range(D)) + tuple(reversed(range(D)))
    return tuple(c % D for c in range(v * D))


def device_chunks(kind: str, D: int, v: int | None = None) -> tuple[tuple[int, ...], ...]:
    """The chunks each device holds, ascending (the inverse of :func:`chunk_devices`; the
    order torch's stage list on a rank takes)."""
    devices = chunk_devices(kind, D, v)
    return tuple(tuple(c for c, d in enumerate(devices) if d == dev) for dev in range(D))


def balanced_counts(L: int, C: int) -> tuple[int, ...]:
    """``L`` layers in ``C`` contiguous chunks whose counts differ by at most one (larger
    first, like ``torch.tensor_split``)."""
    if not 1 <= C <= L:
        raise LayoutError(f"cannot cut {L} layers into {C} non-empty chunks (need 1 <= C <= L)")
    q, r = divmod(L, C)
    return tuple(q + 1 if c < r else q for c in range(C))


@dataclass(frozen=True)
class Layout:
    """A partition of a per-layer problem's layers into chunks, placed on ``D`` devices."""

    kind: str
    D: int
    counts: tuple[int, ...]

    def __post_init__(self) -> None:
        C = len(self.counts)
        if any(not isinstance(n, int) or n < 1 for n in self.counts):
            raise LayoutError(f"partition {list(self.counts)}: every chunk needs >= 1 layer")
        want = {"one": self.D, "v": 2 * self.D}.get(self.kind)
        if want is not None and C != want:
            raise LayoutError(f"layout {self.kind!r} on D = {self.D} devices needs {want} "
                              f"chunks, the partition has {C}")
        if self.kind == "loop" and C % self.D:
            raise LayoutError(f"layout 'loop' on D = {self.D} devices needs a multiple of D "
                              f"chunks, the partition has {C}")
        chunk_devices(self.kind, self.D, max(C // self.D, 1))  # validates kind and D

    @property
    def C(self) -> int:
        return len(self.counts)

    @property
    def v(self) -> int:
        return self.C // self.D

    @property
    def devices(self) -> tuple[int, ...]:
        return chunk_devices(self.kind, self.D, self.v)


def _split_totals(layers: Sequence[StageCosts], first: bool) -> dict[str, tuple[float, ...]]:
    """A chunk's split-backward tables from its layers' (docs/MODEL.md §1c).

    A chunk's ``I`` runs its layers' input-gradient passes and its ``W`` their weight-gradient
    passes: the sums. The first chunk differs: its input needs no gradient, so, as torch's first
    stage does, its ``I`` computes nothing (it costs what layer 0's ``I`` costs, bookkeeping)
    and its ``W`` is its whole backward: layer 0's ``W`` plus every other layer's ``I`` and
    ``W``; in recompute mode its ``I`` is the recompute forward, layer 0's ``ribwd`` plus every
    other layer's ``ribwd - ibwd``.
    """
    cols = {k: list(zip(*(getattr(st, k) for st in layers))) for k in SPLIT_KINDS}
    if not first:
        return {k: tuple(sum(v) for v in cols[k]) for k in SPLIT_KINDS}
    i, ri, w = (cols[k] for k in SPLIT_KINDS)
    return {
        "ibwd": tuple(v[0] for v in i),
        "ribwd": tuple(r[0] + sum(r[1:]) - sum(x[1:]) for r, x in zip(ri, i)),
        "wbwd": tuple(ww[0] + sum(x[1:]) + sum(ww[1:]) for ww, x in zip(w, i)),
    }


def chunk_memory(layers: Sequence[StageCosts]) -> StageMemory | None:
    """The memory figures of a chunk of ``layers`` (None when one lacks them): parameter,
    saved-activation and held bytes summed, the input bytes of its first layer."""
    mems = [st.memory for st in layers]
    if not all(m is not None for m in mems):
        return None
    held = [m.w_held_bytes_per_sample for m in mems]  # type: ignore[union-attr]
    return StageMemory(
        param_bytes=sum(m.param_bytes for m in mems),  # type: ignore[union-attr]
        saved_act_bytes_per_sample=sum(
            m.saved_act_bytes_per_sample for m in mems),  # type: ignore[union-attr]
        input_bytes_per_sample=mems[0].input_bytes_per_sample,  # type: ignore[union-attr]
        w_held_bytes_per_sample=None if None in held else sum(held),  # type: ignore
    )


def group_layers(problem: Problem, counts: Sequence[int], name: str | None = None) -> Problem:
    """The chunk problem of a partition: stage ``c`` is chunk ``c``, its costs the sums of its
    layers' costs (module docstring). ``counts`` must add up to the problem's stage count."""
    counts = tuple(int(n) for n in counts)
    if sum(counts) != problem.S or any(n < 1 for n in counts):
        raise LayoutError(f"partition {list(counts)} must cut the {problem.S} layers of "
                          f"{problem.name!r} into non-empty chunks (sum {problem.S})")
    ends = list(accumulate(counts))
    starts = [0, *ends[:-1]]
    split = problem.has_split_backward
    stages = []
    for a, b in zip(starts, ends):
        layers = problem.stages[a:b]

        def total(kind: str, layers: Sequence[StageCosts] = layers) -> tuple[float, ...]:
            return tuple(sum(vals) for vals in zip(*(getattr(st, kind) for st in layers)))

        memory = chunk_memory(layers)
        far = None
        if any(st.bwd_far is not None for st in layers):  # weighted by each layer's bwd at B
            w = [st.bwd[-1] for st in layers]
            far = sum((st.bwd_far or 1.0) * x for st, x in zip(layers, w)) / sum(w)
        names = [st.name for st in layers]
        stages.append(StageCosts(
            fwd=total("fwd"), bwd=total("bwd"), rbwd=total("rbwd"),
            opt=sum(st.opt for st in layers), memory=memory,
            name=names[0] if len(names) == 1 else f"L{a}-{b - 1} {names[0]}..{names[-1]}",
            extra={"layers": [a, b]}, bwd_far=far,
            **(_split_totals(layers, first=a == 0) if split else {}),
        ))
    links = tuple(problem.links[b - 1] for b in ends[:-1])
    prov = dict(problem.provenance)
    prov.update(derived_from=problem.name, layers_per_stage=list(counts),
                derivation="chunk cost = sum of its layers' costs at each size "
                           "(umpipe_bench.layout.group_layers)")
    return Problem(
        name=name or f"{problem.name}[{'-'.join(map(str, counts))}]",
        B=problem.B, sizes=problem.sizes, stages=tuple(stages), links=links, provenance=prov,
        device_capacity=problem.device_capacity,
        description=f"{problem.name} grouped into {len(counts)} chunks of {list(counts)} layers",
    ).validate()
