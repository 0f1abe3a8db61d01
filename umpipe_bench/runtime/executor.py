"""Run one stage's operation list for one iteration (MODEL.md §3, §5).

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

__all__ = ["IterStats", "StageContext", "run_ops"]


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


def _ranges(sizes: Sequence[int]) -> list[tuple[int, int]]:
    out, a = [], 0
    for m in sizes:
        out.append((a, a + int(m)))
        a += int(m)
    return out


def run_ops(
    ctx: StageContext,
    ops: Sequence[Sequence[Any]],
    mode: str,
    fwd_sizes: Sequence[int],
    up_sizes: Sequence[int] | None,
    down_sizes: Sequence[int] | None,
) -> IterStats:
    """Execute ``ops`` (items ``(kind, index, start, stop)``) for this stage, one iteration.

    ``fwd_sizes`` is this stage's forward partition ``P[s]``; ``up_sizes`` the upstream
    stage's forward partition ``P[s-1]`` (how activations arrive); ``down_sizes`` the
    downstream stage's backward partition ``Q[s+1]`` (how gradients arrive).
    """
    s, B = ctx.stage, ctx.B
    wait = [0.0]

    def timed(
        fn: Callable[[int, int, int], torch.Tensor],
    ) -> Callable[[int, int, int], torch.Tensor]:
        def inner(k: int, a: int, b: int) -> torch.Tensor:
            t = time.perf_counter()
            try:
                return fn(k, a, b)
            finally:
                wait[0] += time.perf_counter() - t

        return inner

    current = [""]
    prefetchers: list[Prefetcher] = []

    def source(
        ch: Channel, kind: int, sizes: Sequence[int], tail: tuple[int, ...], dt: torch.dtype | None
    ) -> ChunkStream:
        if ctx.prefetch:
            pf = Prefetcher(ch, kind, _ranges(sizes), tail, dt)
            prefetchers.append(pf)
            return ChunkStream(
                sizes, timed(lambda k, a, b: pf.get(k, a, b, context=f"for {current[0]}"))
            )
        return ChunkStream(
            sizes,
            timed(lambda k, a, b: ch.recv(kind, k, a, b, tail, dt, context=f"for {current[0]}")),
        )

    acts: ChunkStream | None = None
    grads: ChunkStream | None = None
    if not ctx.first:
        assert ctx.prev is not None and up_sizes is not None
        acts = source(ctx.prev, KIND_ACT, up_sizes, ctx.in_tail, ctx.in_dtype)
    if not ctx.last:
        assert ctx.next is not None and down_sizes is not None
        grads = source(ctx.next, KIND_GRAD, down_sizes, ctx.out_tail, ctx.out_dtype)

    fwd_ranges = _ranges(fwd_sizes)
    stash: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}
    saved_inputs = SampleBuffer()
    loss_total = 0.0
    busy = 0.0

    def stage_input(a: int, b: int) -> torch.Tensor:
        if ctx.first:
            assert ctx.inputs is not None
            return ctx.inputs[a:b]
        assert acts is not None
        return acts.take(a, b)

    def leaf(x: torch.Tensor) -> torch.Tensor:
        # a fresh leaf, so x.grad is this microbatch's input gradient
        x = x.detach()
        if not ctx.first and x.is_floating_point():
            x.requires_grad_(True)
        return x

    def loss_of(y: torch.Tensor, a: int, b: int) -> torch.Tensor:
        assert ctx.targets is not None
        return ctx.loss_fn(y, ctx.targets[a:b]) / B

    def backward_from(y: torch.Tensor, a: int, b: int) -> None:
        if ctx.last:
            y.backward()  # y is this microbatch's loss / B
        else:
            assert grads is not None
            torch.autograd.backward(y, grads.take(a, b))

    def send_input_grad(x: torch.Tensor, j: int, a: int, b: int) -> None:
        if ctx.first:
            return
        assert ctx.prev is not None
        g = x.grad if x.grad is not None else torch.zeros_like(x)
        ctx.prev.send(g, KIND_GRAD, j, a, b, expect=(ctx.in_tail, ctx.in_dtype))

    for item in ops:
        kind, j, a, b = str(item[0]), int(item[1]), int(item[2]), int(item[3])
        current[0] = f"{s}{kind}{j} (samples [{a}, {b}))"
        if ctx.before_op is not None:
            ctx.before_op(ctx.op_counter)
        ctx.op_counter += 1
        t0 = time.perf_counter()
        w0 = wait[0]
        if kind == "F":
            x = stage_input(a, b)
            if mode == "stash":
                xin = leaf(x)
                y = ctx.module(xin)
                if ctx.last:
                    y = loss_of(y, a, b)
                    loss_total += float(y.detach())
                stash[j] = (xin, y)
            else:
                if not ctx.first:
                    saved_inputs.append(x)
                with torch.no_grad():
                    y = ctx.module(x)
                    if ctx.last:
                        loss_total += float(loss_of(y, a, b))
            if not ctx.last:
                assert ctx.next is not None
                ctx.next.send(y, KIND_ACT, j, a, b, expect=(ctx.out_tail, ctx.out_dtype))
        elif kind == "B":
            if mode == "stash":
                if fwd_ranges[j] != (a, b):
                    raise RuntimeError(
                        f"stage {s}: stash mode backward {kind}{j} over [{a}, {b}) does not match "
                        f"forward microbatch {j} over {list(fwd_ranges[j])} (needs Q == P)"
                    )
                xin, y = stash.pop(j)
            else:
                xin = leaf(
                    ctx.inputs[a:b]
                    if ctx.first and ctx.inputs is not None
                    else saved_inputs.take(a, b)
                )
                y = ctx.module(xin)
                if ctx.last:
                    y = loss_of(y, a, b)
            backward_from(y, a, b)
            del y
            send_input_grad(xin, j, a, b)
        else:
            raise ValueError(f"stage {s}: unknown op kind {kind!r} in {current[0]}")
        busy += time.perf_counter() - t0 - (wait[0] - w0)
    if stash:
        raise RuntimeError(f"stage {s}: forward microbatches {sorted(stash)} never ran backward")
    t = time.perf_counter()
    for pf in prefetchers:
        pf.join()
    for ch in (ctx.prev, ctx.next):
        if ch is not None:
            ch.wait()
    wait[0] += time.perf_counter() - t
    return IterStats(loss=loss_total if ctx.last else None, compute_s=busy, wait_s=wait[0])
