"""Run one stage's operation list for one iteration (docs/MODEL.md §3, §5).

The executor does exactly what the list says, in order:

* ``F(j)`` over samples ``[a, b)``: take the inputs (stage 0: the batch; otherwise re-chunked
  from the upstream stream), run the stage, send the output downstream (last stage: add the
  loss ``sum of per-sample losses / B``).
* ``B(j)`` over ``[a, b)``: take the output gradient (re-chunked from the downstream stream;
  last stage: the loss), back-propagate, send the input gradient upstream.

Memory modes: ``stash`` keeps each forward microbatch's autograd graph until its backward
(``Q == P``); ``recompute`` runs forwards under ``no_grad`` keeping only the stage inputs, and
every backward microbatch re-runs the forward on its slice of those inputs with grad enabled
(GPipe's re-materialization). Parameter gradients accumulate across microbatches, so after the
list is done every ``.grad`` is the full mini-batch gradient whatever the plan.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from .comm import KIND_ACT, KIND_GRAD, Channel, Prefetcher
from .rechunk import ChunkStream, SampleBuffer

__all__ = ["IterStats", "OpTime", "StageContext", "StageRunner", "run_ops"]


@dataclass
class StageContext:
    """One stage's fixed state: module, data, links and the boundary shapes from the probe."""

    stage: int
    S: int
    B: int
    module: nn.Module
    loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]
    inputs: torch.Tensor | None = None  # stage 0: the whole batch
    targets: torch.Tensor | None = None  # last stage: the whole batch's targets
    prev: Channel | None = None
    next: Channel | None = None
    in_tail: tuple[int, ...] = ()
    in_dtype: torch.dtype | None = None
    out_tail: tuple[int, ...] = ()
    out_dtype: torch.dtype | None = None
    #: receive each incoming stream on a background thread (gloo; see comm.Prefetcher)
    prefetch: bool = False
    #: called with the running op number before each op (fault injection in tests)
    before_op: Callable[[int], None] | None = None
    op_counter: int = field(default=0)

    @property
    def first(self) -> bool:
        return self.stage == 0

    @property
    def last(self) -> bool:
        return self.stage == self.S - 1


@dataclass
class IterStats:
    """What one stage measured in one iteration."""

    loss: float | None  # last stage only: sum over microbatches of loss/B
    compute_s: float  # time in ops minus time waiting for receives
    wait_s: float  # time blocked in receives
    #: per-op timers, one :class:`OpTime` per executed op, in execution order
    ops: list[OpTime] = field(default_factory=list)


@dataclass(frozen=True)
class OpTime:
    """One op's timers (seconds; ``start``/``end`` from the runner's creation).

    ``wait``: blocked in receives; ``take``: assembling the op's input or output gradient from
    the incoming stream or the kept inputs outside those waits (the re-chunking concatenation,
    docs/MODEL.md §5); ``send``: handing the result to the outgoing link. The rest of
    ``end - start`` is the stage's own compute.
    """

    kind: str
    index: int
    start_sample: int
    stop_sample: int
    start: float
    end: float
    wait: float
    take: float
    send: float


def _ranges(sizes: Sequence[int]) -> list[tuple[int, int]]:
    out, a = [], 0
    for m in sizes:
        out.append((a, a + int(m)))
        a += int(m)
    return out


class StageRunner:
    """One stage's iteration as named steps, as torch's ``PipelineStage`` keeps
    ``forward_one_chunk`` and ``backward_one_chunk``.

    Built per iteration: it opens the incoming streams (activations from upstream in
    ``P[s-1]``'s sizes, gradients from downstream in ``Q[s+1]``'s), then :meth:`run` executes
    an op list (docs/MODEL.md §3) through :meth:`forward_one_chunk` and
    :meth:`backward_one_chunk`, and :meth:`finish` waits for the last transfers. Time blocked
    in receives is counted in :attr:`wait_s`, compute time in :attr:`busy_s`.
    """

    def __init__(
        self,
        ctx: StageContext,
        mode: str,
        fwd_sizes: Sequence[int],
        up_sizes: Sequence[int] | None,
        down_sizes: Sequence[int] | None,
    ) -> None:
        self.ctx = ctx
        self.mode = mode
        self.fwd_ranges = _ranges(fwd_sizes)
        self.wait_s = 0.0
        self.busy_s = 0.0
        self.loss_total = 0.0
        self.current = ""  # the op running now, named in receive errors
        self.t0 = time.perf_counter()
        self.ops: list[OpTime] = []
        self._take_s = 0.0  # of the running op
        self._send_s = 0.0
        self.stash: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
        self.saved_inputs = SampleBuffer()
        self._prefetchers: list[Prefetcher] = []
        self.acts: ChunkStream | None = None
        self.grads: ChunkStream | None = None
        if not ctx.first:
            assert ctx.prev is not None and up_sizes is not None
            self.acts = self._stream(ctx.prev, KIND_ACT, up_sizes, ctx.in_tail, ctx.in_dtype)
        if not ctx.last:
            assert ctx.next is not None and down_sizes is not None
            self.grads = self._stream(ctx.next, KIND_GRAD, down_sizes, ctx.out_tail,
                                      ctx.out_dtype)

    # ------------------------------------------------------------------ receiving
    def _stream(self, ch: Channel, kind: int, sizes: Sequence[int], tail: tuple[int, ...],
                dt: torch.dtype | None) -> ChunkStream:
        """A re-chunking stream over one incoming direction (prefetched on gloo)."""
        if self.ctx.prefetch:
            pf = Prefetcher(ch, kind, _ranges(sizes), tail, dt)
            self._prefetchers.append(pf)

            def fetch(k: int, a: int, b: int) -> torch.Tensor:
                return pf.get(k, a, b, context=f"for {self.current}")
        else:
            def fetch(k: int, a: int, b: int) -> torch.Tensor:
                return ch.recv(kind, k, a, b, tail, dt, context=f"for {self.current}")

        def timed(k: int, a: int, b: int) -> torch.Tensor:
            t = time.perf_counter()
            try:
                return fetch(k, a, b)
            finally:
                self.wait_s += time.perf_counter() - t

        return ChunkStream(sizes, timed)

    def _timed_take(self, take: Callable[[int, int], torch.Tensor], a: int,
                    b: int) -> torch.Tensor:
        """``take(a, b)``, its time outside receive waits counted in the op's ``take``."""
        t, w = time.perf_counter(), self.wait_s
        try:
            return take(a, b)
        finally:
            self._take_s += time.perf_counter() - t - (self.wait_s - w)

    def _send(self, ch: Any, y: torch.Tensor, kind: int, j: int, a: int, b: int,
              expect: tuple[tuple[int, ...], torch.dtype | None]) -> None:
        t = time.perf_counter()
        ch.send(y, kind, j, a, b, expect=expect)
        self._send_s += time.perf_counter() - t

    def _stage_input(self, a: int, b: int) -> torch.Tensor:
        if self.ctx.first:
            assert self.ctx.inputs is not None
            return self.ctx.inputs[a:b]
        assert self.acts is not None
        return self._timed_take(self.acts.take, a, b)

    def _leaf(self, x: torch.Tensor) -> torch.Tensor:
        """A fresh leaf, so ``x.grad`` is this microbatch's input gradient."""
        x = x.detach()
        if not self.ctx.first and x.is_floating_point():
            x.requires_grad_(True)
        return x

    def _loss(self, y: torch.Tensor, a: int, b: int) -> torch.Tensor:
        """Sum of per-sample losses / B, so gradients do not depend on the plan (§5)."""
        assert self.ctx.targets is not None
        return self.ctx.loss_fn(y, self.ctx.targets[a:b]) / self.ctx.B

    # ------------------------------------------------------------------ the two steps
    def forward_one_chunk(self, j: int, a: int, b: int) -> None:
        """``F(j)`` over samples ``[a, b)``: input, stage, send (last stage: the loss)."""
        ctx = self.ctx
        x = self._stage_input(a, b)
        if self.mode == "stash":
            xin = self._leaf(x)
            y = ctx.module(xin)
            if ctx.last:
                y = self._loss(y, a, b)
                self.loss_total += float(y.detach())
            self.stash[j] = (xin, y)
        else:
            if not ctx.first:
                self.saved_inputs.append(x)
            with torch.no_grad():
                y = ctx.module(x)
                if ctx.last:
                    self.loss_total += float(self._loss(y, a, b))
        if not ctx.last:
            assert ctx.next is not None
            self._send(ctx.next, y, KIND_ACT, j, a, b, (ctx.out_tail, ctx.out_dtype))

    def backward_one_chunk(self, j: int, a: int, b: int) -> None:
        """``B(j)`` over ``[a, b)``: output gradient, back-propagation (recompute mode: the
        forward again on the kept inputs first), input gradient upstream."""
        ctx = self.ctx
        if self.mode == "stash":
            if self.fwd_ranges[j] != (a, b):
                raise RuntimeError(
                    f"stage {ctx.stage}: stash mode backward B{j} over [{a}, {b}) does not "
                    f"match forward microbatch {j} over {list(self.fwd_ranges[j])} "
                    "(needs Q == P)"
                )
            xin, y = self.stash.pop(j)
        else:
            src = (ctx.inputs[a:b] if ctx.first and ctx.inputs is not None
                   else self._timed_take(self.saved_inputs.take, a, b))
            xin = self._leaf(src)
            y = ctx.module(xin)
            if ctx.last:
                y = self._loss(y, a, b)
        if ctx.last:
            y.backward()  # y is this microbatch's loss / B
        else:
            assert self.grads is not None
            torch.autograd.backward(y, self._timed_take(self.grads.take, a, b))
        del y
        if not ctx.first:
            assert ctx.prev is not None
            g = xin.grad if xin.grad is not None else torch.zeros_like(xin)
            self._send(ctx.prev, g, KIND_GRAD, j, a, b, (ctx.in_tail, ctx.in_dtype))

    # ------------------------------------------------------------------ the loop
    def run(self, ops: Sequence[Sequence[Any]]) -> IterStats:
        """Execute ``ops`` (items ``(kind, index, start, stop)``) in order, then finish."""
        ctx = self.ctx
        steps = {"F": self.forward_one_chunk, "B": self.backward_one_chunk}
        for item in ops:
            kind, j, a, b = str(item[0]), int(item[1]), int(item[2]), int(item[3])
            self.current = f"{ctx.stage}{kind}{j} (samples [{a}, {b}))"
            if ctx.before_op is not None:
                ctx.before_op(ctx.op_counter)
            ctx.op_counter += 1
            step = steps.get(kind)
            if step is None:
                raise ValueError(f"stage {ctx.stage}: unknown op kind {kind!r} in {self.current}")
            t0, w0 = time.perf_counter(), self.wait_s
            self._take_s = self._send_s = 0.0
            step(j, a, b)
            t1 = time.perf_counter()
            self.busy_s += t1 - t0 - (self.wait_s - w0)
            self.ops.append(OpTime(kind, j, a, b, t0 - self.t0, t1 - self.t0, self.wait_s - w0,
                                   self._take_s, self._send_s))
        return self.finish()

    def finish(self) -> IterStats:
        """Check every stashed forward ran backward, wait for the last transfers."""
        ctx = self.ctx
        if self.stash:
            raise RuntimeError(
                f"stage {ctx.stage}: forward microbatches {sorted(self.stash)} never ran backward"
            )
        t = time.perf_counter()
        for pf in self._prefetchers:
            pf.join()
        for ch in (ctx.prev, ctx.next):
            if ch is not None:
                ch.wait()
        self.wait_s += time.perf_counter() - t
        return IterStats(loss=self.loss_total if ctx.last else None, compute_s=self.busy_s,
                         wait_s=self.wait_s, ops=self.ops)


def run_ops(
    ctx: StageContext,
    ops: Sequence[Sequence[Any]],
    mode: str,
    fwd_sizes: Sequence[int],
    up_sizes: Sequence[int] | None,
    down_sizes: Sequence[int] | None,
) -> IterStats:
    """Execute ``ops`` for this stage, one iteration (a :class:`StageRunner`).

    ``fwd_sizes`` is this stage's forward partition ``P[s]``; ``up_sizes`` the upstream
    stage's forward partition ``P[s-1]`` (how activations arrive); ``down_sizes`` the
    downstream stage's backward partition ``Q[s+1]`` (how gradients arrive).
    """
    return StageRunner(ctx, mode, fwd_sizes, up_sizes, down_sizes).run(ops)
