"""The measuring engine: stage rigs, interleaved timing of every cell, memory figures.

What is measured for each stage ``s`` and size ``m`` of the grid (docs/MODEL.md §1):

* ``fwd[s](m)``: the stage's forward on ``m`` samples with autograd recording (stash mode keeps
  these activations); the last stage includes the loss (``loss(out, targets) / B``).
* ``bwd[s](m)``: the backward that follows that forward, from the gradient arriving from the
  next stage (the loss on the last stage) down to the stage input (stage 0: parameters only).
* ``rbwd[s](m)``: recompute mode's backward, timed as one interval: forward again with
  autograd, then backward. It is a separate pass, not ``fwd + bwd`` added up.
* ``opt[s]``: one optimizer step over the stage's parameters (gradients present).

* ``bwd_far[s]`` (optional): far/near backward time ratio of the stage (docs/MODEL.md §1b),
  from one backward locality cell per stage (:mod:`.locality`).
* ``ibwd/ribwd/wbwd[s](m)`` (optional, ``split=True``; docs/MODEL.md §1c, :mod:`.split`): a
  stash pass split as forward, input-gradient pass I (``ibwd``), then the weight-gradient pass
  W of the same microbatch (``wbwd``); and a recompute pass split as one interval forward + I
  (``ribwd``), then W.

Timing order. After ``warmup`` discarded rounds, each of ``repeats`` rounds visits every cell
(stage x size, plus one optimizer cell and maybe one locality cell per stage) once; round
``r`` starts at a different offset of the cell list (a rotation), and the passes of a cell
(stash, recompute, and with ``split`` the split stash and split recompute passes) rotate their
order every round (two passes: they swap). Slow drift of the machine therefore lands on all cells
alike instead of on the sizes measured last. Each figure is the median over the rounds; its
noise figure is max/min.

Clocks: on CPU ``time.perf_counter`` around synchronous ops (wall time, what a pipeline
sees); on CUDA, CUDA events recorded in the stream and read after ``torch.cuda.synchronize()``.
A diagnostic third clock, ``thread-cpu`` (``time.thread_time``: CPU seconds of the calling
thread, one intra-op thread only), leaves out the time the process waits for a core, so on a
shared machine it separates the profile's own error from the other tenants' load.
"""

from __future__ import annotations

import math
import statistics
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from ..errors import ProfileError
from .locality import LocalityRound, locality_round
from .rig import StageRig, prepare_rigs, stage_backward, stage_forward
from .split import backward_input, backward_weight

__all__ = [
    "CLOCKS",
    "CellStats",
    "Clock",
    "Measurements",
    "StageMemoryFigures",
    "StageRig",
    "make_clock",
    "measure_cells",
    "measure_memory",
    "prepare_rigs",
    "stage_backward",
    "stage_forward",
]


class Clock:
    """Wall clock for CPU work: marks are ``perf_counter`` readings."""

    def sync(self) -> None:
        """Wait until queued work is done (nothing to wait for on CPU)."""

    def mark(self) -> Any:
        return time.perf_counter()

    def seconds(self, a: Any, b: Any) -> float:
        return float(b - a)


class CudaClock(Clock):
    """CUDA events recorded in the current stream; read only after :meth:`sync`."""

    def __init__(self, device: torch.device) -> None:
        self.device = device

    def sync(self) -> None:
        torch.cuda.synchronize(self.device)

    def mark(self) -> Any:
        ev = torch.cuda.Event(enable_timing=True)
        ev.record()
        return ev

    def seconds(self, a: Any, b: Any) -> float:
        return float(a.elapsed_time(b)) / 1e3


class ThreadCpuClock(Clock):
    """CPU seconds of the calling thread (``time.thread_time``); needs one intra-op thread
    (CPU autograd runs backward on the calling thread, so that is all the work)."""

    def mark(self) -> Any:
        return time.thread_time()


CLOCKS = ("wall", "thread-cpu")


def make_clock(device: torch.device, kind: str = "wall") -> Clock:
    """The clock for a device: CUDA events on ``cuda``; on CPU ``perf_counter`` (``wall``) or
    ``time.thread_time`` (``thread-cpu``, one thread only)."""
    if kind not in CLOCKS:
        raise ProfileError(f"unknown clock {kind!r}; valid clocks: {', '.join(CLOCKS)}")
    if device.type == "cuda":
        if kind != "wall":
            raise ProfileError("clock 'thread-cpu' is for CPU profiles; CUDA uses CUDA events")
        return CudaClock(device)
    if kind == "thread-cpu":
        if torch.get_num_threads() != 1:
            raise ProfileError(
                f"clock 'thread-cpu' needs threads=1 (got {torch.get_num_threads()}): other "
                "intra-op threads' CPU time would be missed"
            )
        return ThreadCpuClock()
    return Clock()


def _stash_pass(rig: StageRig, m: int, loss_fn: Callable, clock: Clock) -> tuple[float, float]:
    clock.sync()
    t0 = clock.mark()
    _, out = stage_forward(rig, m, loss_fn)
    t1 = clock.mark()
    stage_backward(rig, out, m)
    t2 = clock.mark()
    clock.sync()
    return clock.seconds(t0, t1), clock.seconds(t1, t2)


def _recompute_pass(rig: StageRig, m: int, loss_fn: Callable, clock: Clock) -> float:
    clock.sync()
    t0 = clock.mark()
    _, out = stage_forward(rig, m, loss_fn)
    stage_backward(rig, out, m)
    t1 = clock.mark()
    clock.sync()
    return clock.seconds(t0, t1)


def _split_pass(rig: StageRig, m: int, loss_fn: Callable,
                clock: Clock) -> tuple[float, float, float]:
    """Forward, I, then W of the same microbatch: three intervals (the output is dropped
    inside I's interval, as torch's ``stage_backward_input`` detaches it)."""
    clock.sync()
    t0 = clock.mark()
    x, out = stage_forward(rig, m, loss_fn)
    t1 = clock.mark()
    state = backward_input(rig, x, out, m)
    del out
    t2 = clock.mark()
    backward_weight(state)
    t3 = clock.mark()
    clock.sync()
    return clock.seconds(t0, t1), clock.seconds(t1, t2), clock.seconds(t2, t3)


def _split_recompute_pass(rig: StageRig, m: int, loss_fn: Callable,
                          clock: Clock) -> tuple[float, float]:
    """Recompute mode's split backward: forward again + I as one interval, then W."""
    clock.sync()
    t0 = clock.mark()
    x, out = stage_forward(rig, m, loss_fn)
    state = backward_input(rig, x, out, m)
    del out
    t1 = clock.mark()
    backward_weight(state)
    t2 = clock.mark()
    clock.sync()
    return clock.seconds(t0, t1), clock.seconds(t1, t2)


def _opt_pass(rig: StageRig, clock: Clock) -> float:
    if rig.optimizer is None:
        return 0.0
    clock.sync()
    t0 = clock.mark()
    rig.optimizer.step()
    t1 = clock.mark()
    clock.sync()
    rig.optimizer.zero_grad(set_to_none=False)
    return clock.seconds(t0, t1)


@dataclass(frozen=True)
class CellStats:
    """Median and noise (max/min) of one cell's repeated measurements."""

    median: float
    noise: float
    samples: tuple[float, ...]

    @classmethod
    def of(cls, samples: Sequence[float]) -> CellStats:
        xs = tuple(float(x) for x in samples)
        lo = min(xs)
        noise = max(xs) / lo if lo > 0 else (1.0 if max(xs) == 0 else math.inf)
        return cls(statistics.median(xs), noise, xs)


@dataclass
class Measurements:
    """Per stage and size index: fwd/bwd/rbwd statistics; per stage: opt statistics and,
    when measured, the backward locality rounds (docs/MODEL.md §1b) on ``locality_sizes``."""

    sizes: tuple[int, ...]
    fwd: list[list[CellStats]] = field(default_factory=list)
    bwd: list[list[CellStats]] = field(default_factory=list)
    rbwd: list[list[CellStats]] = field(default_factory=list)
    opt: list[CellStats] = field(default_factory=list)
    #: split backward (``split=True``; empty otherwise): I (stash), forward + I (recompute),
    #: W timed after the stash I, and W timed after the recompute I (a cross-check)
    ibwd: list[list[CellStats]] = field(default_factory=list)
    ribwd: list[list[CellStats]] = field(default_factory=list)
    wbwd: list[list[CellStats]] = field(default_factory=list)
    rwbwd: list[list[CellStats]] = field(default_factory=list)
    #: the forwards timed in the split stash pass (a cross-check of ``fwd``)
    sfwd: list[list[CellStats]] = field(default_factory=list)
    cells_per_round: int = 0
    rounds: int = 0
    locality: list[list[LocalityRound]] = field(default_factory=list)
    locality_sizes: tuple[int, ...] | None = None


_LOCALITY = -1  # the cell index of a stage's backward locality cell


def _cell_order(n_cells: int, round_index: int, repeats: int) -> list[int]:
    """Rotation of ``0..n-1`` starting at a per-round offset spread evenly over the rounds."""
    step = max(1, n_cells // max(1, repeats))
    start = (round_index * step) % n_cells
    return [(start + i) % n_cells for i in range(n_cells)]


def measure_cells(
    rigs: Sequence[StageRig],
    sizes: Sequence[int],
    loss_fn: Callable[[Any, Any], torch.Tensor],
    clock: Clock,
    *,
    repeats: int,
    warmup: int = 1,
    recompute: bool = True,
    opt: bool = True,
    locality: Sequence[int] | None = None,
    split: bool = False,
    split_recompute: bool = True,
    progress: Callable[[int], None] | None = None,
) -> Measurements:
    """Time every (stage, size) cell and every stage's optimizer step, interleaved.

    ``locality``: microbatch sizes of one backward locality cell per stage (a near and a far
    pass, :func:`.locality.locality_round`, docs/MODEL.md §1b), visited in the same rounds.

    ``recompute=False`` skips the rbwd pass (its statistics then copy ``fwd + bwd`` medians and
    are marked with noise NaN); ``opt=False`` skips optimizer cells (opt = 0). Those two
    switches serve the quick per-layer probe used for balancing and the split-backward run
    added to an existing profile (:func:`.profile.split_backward_into`), which keeps the file's
    own rbwd and opt.

    ``split=True`` adds two passes to every (stage, size) cell: the split stash pass (forward,
    I, W) and the split recompute pass (forward + I, W), docs/MODEL.md §1c;
    ``split_recompute=False`` leaves the latter out (``ribwd`` and ``rwbwd`` stay empty: a
    shorter run for scripts that need no ``ribwd``).
    """
    if repeats < 1:
        raise ProfileError(f"repeats must be >= 1, got {repeats}")
    if warmup < 0:
        raise ProfileError(f"warmup must be >= 0, got {warmup}")
    cells: list[tuple[int, int | None]] = [
        (s, i) for i in range(len(sizes)) for s in range(len(rigs))
    ]
    if opt:
        cells += [(s, None) for s in range(len(rigs))]
    if locality is not None:
        cells += [(s, _LOCALITY) for s in range(len(rigs))]
    S, n = len(rigs), len(sizes)
    f_s = [[[] for _ in range(n)] for _ in range(S)]
    b_s = [[[] for _ in range(n)] for _ in range(S)]
    r_s = [[[] for _ in range(n)] for _ in range(S)]
    sp: dict[str, list[list[list[float]]]] = {
        k: [[[] for _ in range(n)] for _ in range(S)]
        for k in ("ibwd", "ribwd", "wbwd", "rwbwd", "sfwd")
    }
    passes = ["stash"] + (["recompute"] if recompute else []) + (
        (["split", "rsplit"] if split_recompute else ["split"]) if split else [])
    o_s: list[list[float]] = [[] for _ in range(S)]
    loc: list[list[LocalityRound]] = [[] for _ in range(S)]
    total = warmup + repeats
    for r in range(total):
        keep = r >= warmup
        for c in _cell_order(len(cells), r, repeats):
            s, i = cells[c]
            rig = rigs[s]
            if i is None:
                t = _opt_pass(rig, clock)
                if keep:
                    o_s[s].append(t)
            elif i == _LOCALITY:
                lr = locality_round(rig, locality or (), loss_fn, clock, r)
                if keep:
                    loc[s].append(lr)
            else:
                m = sizes[i]
                k = r % len(passes)
                for kind in passes[k:] + passes[:k]:
                    if kind == "stash":
                        tf, tb = _stash_pass(rig, m, loss_fn, clock)
                    elif kind == "recompute":
                        tr = _recompute_pass(rig, m, loss_fn, clock)
                    elif kind == "split":
                        tsf, ti, tw = _split_pass(rig, m, loss_fn, clock)
                    else:
                        tri, trw = _split_recompute_pass(rig, m, loss_fn, clock)
                if keep:
                    f_s[s][i].append(tf)
                    b_s[s][i].append(tb)
                    if recompute:
                        r_s[s][i].append(tr)
                    if split:
                        for key, v in (("sfwd", tsf), ("ibwd", ti), ("wbwd", tw)):
                            sp[key][s][i].append(v)
                    if split and split_recompute:
                        sp["ribwd"][s][i].append(tri)
                        sp["rwbwd"][s][i].append(trw)
            if progress is not None:
                progress(1)
    out = Measurements(sizes=tuple(sizes), cells_per_round=len(cells), rounds=total,
                       locality=loc if locality is not None else [],
                       locality_sizes=None if locality is None else tuple(locality))
    for s in range(S):
        out.fwd.append([CellStats.of(f_s[s][i]) for i in range(n)])
        out.bwd.append([CellStats.of(b_s[s][i]) for i in range(n)])
        if recompute:
            out.rbwd.append([CellStats.of(r_s[s][i]) for i in range(n)])
        else:
            out.rbwd.append(
                [
                    CellStats(out.fwd[s][i].median + out.bwd[s][i].median, math.nan, ())
                    for i in range(n)
                ]
            )
        out.opt.append(CellStats.of(o_s[s]) if opt else CellStats(0.0, math.nan, ()))
        if split:
            for key, samples in sp.items():
                if key in ("ribwd", "rwbwd") and not split_recompute:
                    continue
                getattr(out, key).append([CellStats.of(samples[s][i]) for i in range(n)])
    return out


@dataclass(frozen=True)
class StageMemoryFigures:
    """Bytes of one stage (docs/MODEL.md §1): parameters + gradients + optimizer state; tensors
    autograd saves for backward per sample (excluding parameters and the stage input); the
    stage input per sample; the output (activation) and input-gradient per sample."""

    param_bytes: int
    weights_bytes: int
    grad_bytes: int
    optimizer_state_bytes: int
    saved_act_bytes_per_sample: float
    input_bytes_per_sample: float
    output_bytes_per_sample: float
    input_grad_bytes_per_sample: float


def _nbytes(t: torch.Tensor) -> int:
    return t.numel() * t.element_size()


def measure_memory(
    rig: StageRig, m: int, loss_fn: Callable[[Any, Any], torch.Tensor]
) -> StageMemoryFigures:
    """Count bytes, not allocator peaks: saved tensors are caught with autograd's
    ``saved_tensors_hooks`` during one forward of ``m`` samples and counted once per storage;
    parameter storages and the stage input's storage are left out (the input is counted in
    ``input_bytes_per_sample``). Per-sample figures are totals at size ``m`` divided by ``m``."""
    params = list(rig.module.parameters())
    param_ptrs = {p.untyped_storage().data_ptr() for p in params}
    input_ptr = rig.inputs.untyped_storage().data_ptr()
    seen: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        st = t.untyped_storage()
        ptr = st.data_ptr()
        if ptr not in param_ptrs and ptr != input_ptr:
            seen[ptr] = st.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        x, out = stage_forward(rig, m, loss_fn)
    if rig.targets is None:
        output_bytes = _nbytes(out) / m
    else:
        output_bytes = 0.0
    stage_backward(rig, out, m)
    input_grad = _nbytes(x.grad) / m if x.grad is not None else 0.0
    weights = sum(_nbytes(p) for p in params)
    grads = sum(_nbytes(p.grad) for p in params if p.grad is not None)
    state = 0
    if rig.optimizer is not None:
        for st in rig.optimizer.state.values():
            state += sum(_nbytes(v) for v in st.values() if isinstance(v, torch.Tensor))
    return StageMemoryFigures(
        param_bytes=weights + grads + state,
        weights_bytes=weights,
        grad_bytes=grads,
        optimizer_state_bytes=state,
        saved_act_bytes_per_sample=sum(seen.values()) / m,
        input_bytes_per_sample=_nbytes(rig.inputs[:m]) / m,
        output_bytes_per_sample=output_bytes,
        input_grad_bytes_per_sample=input_grad,
    )
