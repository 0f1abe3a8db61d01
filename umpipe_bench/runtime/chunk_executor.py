"""Run one device's action list of a chunk plan for one iteration (docs/EXECUTE.md, "Chunk
plans"; docs/CHUNK-SCHEDULES.md).

A device holds one or more chunks (contiguous layer groups); its list says, in order, which
pass of which chunk's microbatch runs next. For an action of chunk ``c`` over samples
``[a, b)`` (its microbatch in that chunk's partition of that kind):

* ``F``: the input (chunk 0: the batch; otherwise re-chunked from chunk ``c-1``'s output
  stream, :class:`.rechunk.ChunkStream`), the chunk, the output to chunk ``c+1`` (the last
  chunk: the loss, ``sum of per-sample losses / B``);
* ``B``: the output gradient (re-chunked from chunk ``c+1``'s input-gradient stream; the last
  chunk: the loss), the whole backward, the input gradient to chunk ``c-1``;
* ``I``: the same, but only the input gradient is computed; what ``W`` needs is kept
  (:mod:`.split_backward`);
* ``W``: the parameter gradients of the ``I`` microbatches it covers (one or more consecutive
  ones: ``R[c]`` coarsens ``Q[c]``), as one call over all their samples where a cut allows
  (:func:`.split_backward.weight_grad_many`).

Memory modes: ``stash`` keeps each forward microbatch's graph until its ``B`` or ``I``
(``Q[c] = P[c]``); ``recompute`` runs forwards under ``no_grad`` keeping only the chunk's
inputs, and each ``B`` or ``I`` runs the forward again on its slice of them. In recompute an
``I``'s re-run graph is what its ``W`` later finishes, so between the two a microbatch holds
what it holds in stash mode (the input slice itself is released at the ``I``).

Streams are given to the runner as callables: a chunk's incoming streams as
``receive(k, start, stop)`` (producer microbatch ``k``), its outgoing ones as
:class:`Outlet` objects. The device processes wire them to checked point-to-point channels
(:mod:`.chunk_worker`); chunks consecutive on one device, and :func:`run_in_order` (every
device in one process, following the rule's global order), wire them to a
:class:`LocalLink`. Parameter gradients accumulate across microbatches, so after the lists ran
every ``.grad`` is the full mini-batch gradient whatever the plan.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Protocol

import torch
from torch import nn

from ..devsim import parse_action
from ..errors import ExecutionError
from .chunk_job import ChunkEntry
from .executor import IterStats
from .rechunk import ChunkStream, SampleBuffer
from .split_backward import WeightWork, first_chunk_work, input_grad, weight_grad_many

__all__ = ["ChunkLinks", "DeviceRunner", "LocalLink", "Outlet", "Receive", "run_in_order"]

#: producer microbatch ``k`` over samples ``[start, stop)`` of an incoming stream
Receive = Callable[[int, int, int], torch.Tensor]


class Outlet(Protocol):
    """The sending end of a stream."""

    def push(self, y: torch.Tensor, j: int, a: int, b: int) -> None: ...


class LocalLink:
    """A stream inside one process: the producer's pushes, taken by the consumer in order.

    A consumer that asks for a microbatch not produced yet is a list in the wrong order (the
    rule never makes one); it is an error naming both ends, never a wait."""

    def __init__(self, what: str) -> None:
        self.what = what
        self.count = 0  # messages pushed this iteration
        self._q: deque[tuple[int, int, int, torch.Tensor]] = deque()

    def push(self, y: torch.Tensor, j: int, a: int, b: int) -> None:
        self._q.append((j, a, b, y.detach()))
        self.count += 1

    def receive(self, k: int, a: int, b: int) -> torch.Tensor:
        if not self._q or self._q[0][:3] != (k, a, b):
            have = "nothing" if not self._q else "microbatch {} over [{}, {})".format(
                *self._q[0][:3])
            raise RuntimeError(f"{self.what}: microbatch {k} over samples [{a}, {b}) is needed "
                               f"but {have} is next (the list runs an action before its input)")
        return self._q.popleft()[3]

    def __len__(self) -> int:
        return len(self._q)


@dataclass
class ChunkLinks:
    """How one chunk is wired for one iteration: its incoming streams (None at the ends of
    the model) with the producers' partitions, and its outgoing ones."""

    acts: Receive | None = None
    act_sizes: Sequence[int] = ()
    grads: Receive | None = None
    grad_sizes: Sequence[int] = ()
    act_out: Outlet | None = None
    grad_out: Outlet | None = None


def _ranges(sizes: Sequence[int]) -> list[tuple[int, int]]:
    out, a = [], 0
    for m in sizes:
        out.append((a, a + int(m)))
        a += int(m)
    return out


@dataclass
class _Chunk:
    """One chunk's state on its device during an iteration."""

    c: int
    module: nn.Module
    params: list[nn.Parameter]
    first: bool
    last: bool
    ranges: dict[str, list[tuple[int, int]]]  # "F", "G" (B or I), "W"
    links: ChunkLinks
    acts: ChunkStream | None = None
    grads: ChunkStream | None = None
    next: dict[str, int] = field(default_factory=lambda: {"F": 0, "G": 0, "W": 0})
    stash: dict[int, tuple[torch.Tensor, torch.Tensor]] = field(default_factory=dict)
    saved: SampleBuffer = field(default_factory=SampleBuffer)
    pending: deque[tuple[int, int, WeightWork]] = field(default_factory=deque)


class DeviceRunner:
    """One device's iteration of one entry: :meth:`step` runs one action, :meth:`run` the
    device's whole list and :meth:`finish`. Time blocked in receives is :attr:`wait_s`,
    compute (the rest of the actions' time) :attr:`busy_s`."""

    def __init__(self, device: int, entry: ChunkEntry, modules: dict[int, nn.Module],
                 links: dict[int, ChunkLinks], B: int,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 inputs: torch.Tensor | None, targets: torch.Tensor | None,
                 before_op: Callable[[], None] | None = None) -> None:
        self.device = device
        self.entry = entry
        self.B = B
        self.loss_fn = loss_fn
        self.inputs = inputs
        self.targets = targets
        self.before_op = before_op
        self.mode = entry.mode
        self.loss_total = 0.0
        self.wait_s = 0.0
        self.busy_s = 0.0
        self.done = 0  # actions run
        self.current = f"device {device}"
        self.chunks: dict[int, _Chunk] = {}
        C = entry.C
        for c in (c for c in range(C) if entry.devices[c] == device):
            mod = modules[c]
            ln = links[c]
            ch = _Chunk(c=c, module=mod, params=[p for p in mod.parameters() if p.requires_grad],
                        first=c == 0, last=c == C - 1, links=ln,
                        ranges={"F": _ranges(entry.fwd[c]), "G": _ranges(entry.bwd[c]),
                                "W": _ranges(entry.wgt[c])})
            if c > 0:
                if ln.acts is None:
                    raise ValueError(f"device {device}, chunk {c}: no incoming activations")
                ch.acts = ChunkStream(ln.act_sizes, self._timed(ln.acts))
            if c < C - 1:
                if ln.grads is None:
                    raise ValueError(f"device {device}, chunk {c}: no incoming gradients")
                ch.grads = ChunkStream(ln.grad_sizes, self._timed(ln.grads))
            self.chunks[c] = ch

    def _timed(self, receive: Receive) -> Receive:
        """``receive``, its time blocked counted in :attr:`wait_s`."""
        def timed(k: int, a: int, b: int) -> torch.Tensor:
            t = time.perf_counter()
            try:
                return receive(k, a, b)
            finally:
                self.wait_s += time.perf_counter() - t
        return timed

    # ------------------------------------------------------------------ passes
    def _loss(self, y: torch.Tensor, a: int, b: int) -> torch.Tensor:
        assert self.targets is not None
        return self.loss_fn(y, self.targets[a:b]) / self.B

    def _leaf(self, ch: _Chunk, x: torch.Tensor) -> torch.Tensor:
        x = x.detach()
        if not ch.first and x.is_floating_point():
            x.requires_grad_(True)
        return x

    def _input(self, ch: _Chunk, a: int, b: int) -> torch.Tensor:
        if ch.first:
            assert self.inputs is not None
            return self.inputs[a:b]
        assert ch.acts is not None
        return ch.acts.take(a, b)

    def _forward(self, ch: _Chunk, j: int, a: int, b: int) -> None:
        x = self._input(ch, a, b)
        if self.mode == "stash":
            xin = self._leaf(ch, x)
            y = ch.module(xin)
            if ch.last:
                y = self._loss(y, a, b)
                self.loss_total += float(y.detach())
            ch.stash[j] = (xin, y)
        else:
            if not ch.first:
                ch.saved.append(x)
            with torch.no_grad():
                y = ch.module(x)
                if ch.last:
                    self.loss_total += float(self._loss(y, a, b))
        if ch.links.act_out is not None:
            ch.links.act_out.push(y, j, a, b)

    def _graph(self, ch: _Chunk, j: int, a: int, b: int) -> tuple[torch.Tensor, torch.Tensor]:
        """``(input leaf, output)`` of microbatch ``[a, b)`` with its graph: the stashed
        forward, or (recompute) the forward again on the kept inputs."""
        if self.mode == "stash":
            if ch.ranges["F"][j] != (a, b) or j not in ch.stash:
                raise RuntimeError(f"{self.current}: stash mode needs the backward partition "
                                   "to equal the forward one and each forward to run first")
            return ch.stash.pop(j)
        src = self.inputs[a:b] if ch.first and self.inputs is not None else ch.saved.take(a, b)
        xin = self._leaf(ch, src)
        y = ch.module(xin)
        if ch.last:
            y = self._loss(y, a, b)
        return xin, y

    def _out_grad(self, ch: _Chunk, a: int, b: int) -> torch.Tensor | None:
        if ch.last:
            return None
        assert ch.grads is not None
        return ch.grads.take(a, b)

    def _send_input_grad(self, ch: _Chunk, g: torch.Tensor, j: int, a: int, b: int) -> None:
        if ch.links.grad_out is not None:
            ch.links.grad_out.push(g, j, a, b)

    def _backward(self, ch: _Chunk, j: int, a: int, b: int) -> None:
        xin, y = self._graph(ch, j, a, b)
        torch.autograd.backward(y, self._out_grad(ch, a, b))
        del y
        if not ch.first:
            self._send_input_grad(ch, xin.grad if xin.grad is not None
                                  else torch.zeros_like(xin), j, a, b)

    def _input_pass(self, ch: _Chunk, j: int, a: int, b: int) -> None:
        xin, y = self._graph(ch, j, a, b)
        g = self._out_grad(ch, a, b)
        if ch.first:
            work = first_chunk_work(y, g, ch.params)
        else:
            dx, work = input_grad(y, xin, g, ch.params)
            del y
            self._send_input_grad(ch, dx, j, a, b)
        ch.pending.append((a, b, work))

    def _weight_pass(self, ch: _Chunk, j: int, a: int, b: int) -> None:
        at, works = a, []
        while at < b:
            if not ch.pending or ch.pending[0][0] != at or ch.pending[0][1] > b:
                raise RuntimeError(f"{self.current}: W covers samples [{a}, {b}) but the I "
                                   f"passes of [{at}, {b}) have not all run")
            _, at, work = ch.pending.popleft()
            works.append(work)
        weight_grad_many(works)

    # ------------------------------------------------------------------ the list
    def step(self, action: str) -> None:
        """Run one action (``"3I2"``) of this device."""
        act = parse_action(action)
        c, kind, j = act.chunk, act.kind, act.mb
        ch = self.chunks.get(c)
        if ch is None:
            raise ValueError(f"device {self.device}: action {action} names chunk {c}, which "
                             f"is not on this device (its chunks: {sorted(self.chunks)})")
        part = "W" if kind == "W" else "F" if kind == "F" else "G"
        if (kind == "B" and self.entry.split) or (kind in "IW" and not self.entry.split):
            raise ValueError(f"device {self.device}, chunk {c}: action {action} does not fit "
                             f"a plan with split = {self.entry.split}")
        if j != ch.next[part] or j >= len(ch.ranges[part]):
            raise RuntimeError(f"device {self.device}, chunk {c}: action {action} out of "
                               f"order (the next {kind} of chunk {c} is {ch.next[part]})")
        a, b = ch.ranges[part][j]
        self.current = f"device {self.device}, chunk {c}, {action} (samples [{a}, {b}))"
        t0, w0 = time.perf_counter(), self.wait_s
        try:
            if self.before_op is not None:
                self.before_op()
            {"F": self._forward, "B": self._backward, "I": self._input_pass,
             "W": self._weight_pass}[kind](ch, j, a, b)
        except (ExecutionError, KeyboardInterrupt):
            raise  # a lost peer or a refused message: names its stage, and the action
        except Exception as exc:
            if str(exc).startswith(self.current):
                raise
            raise RuntimeError(f"{self.current}: {type(exc).__name__}: {exc}") from exc
        self.busy_s += time.perf_counter() - t0 - (self.wait_s - w0)
        ch.next[part] += 1
        self.done += 1

    def run(self, actions: Sequence[str]) -> IterStats:
        """Run ``actions`` in order, then :meth:`finish`."""
        for action in actions:
            self.step(action)
        return self.finish()

    def finish(self) -> IterStats:
        """Check that every microbatch of every chunk ran every pass (unless the entry turns
        the check off) and return the iteration's figures."""
        if self.entry.check_complete:
            for c, ch in self.chunks.items():
                kinds = ("F", "G", "W") if self.entry.split else ("F", "G")
                for part in kinds:
                    if ch.next[part] != len(ch.ranges[part]):
                        name = {"F": "F", "G": "I" if self.entry.split else "B", "W": "W"}[part]
                        raise RuntimeError(
                            f"device {self.device}, chunk {c}: {ch.next[part]} of "
                            f"{len(ch.ranges[part])} {name} passes ran")
        return IterStats(loss=self.loss_total if self.entry.C - 1 in self.chunks else None,
                         compute_s=self.busy_s, wait_s=self.wait_s)


def run_in_order(entry: ChunkEntry, order: Sequence[str], modules: dict[int, nn.Module],
                 B: int, loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 inputs: torch.Tensor, targets: torch.Tensor
                 ) -> tuple[list[IterStats], dict[tuple[int, str], int]]:
    """Every device of ``entry`` in this process, following ``order`` (the rule's global order
    as ``"<device>:<action>"`` items, or the actions alone): each action runs after its
    inputs, so every stream is a :class:`LocalLink`. Returns each device's figures and the
    messages each cross-device stream carried, keyed ``(boundary, kind)``; the same executor
    code as the device processes, without processes (the fast tests)."""
    C, dev = entry.C, entry.devices
    fwd_links = [LocalLink(f"activations of chunk {c} for chunk {c + 1}") for c in range(C - 1)]
    bwd_links = [LocalLink(f"gradients of chunk {c + 1} for chunk {c}") for c in range(C - 1)]
    runners = []
    for d in range(entry.D):
        links = {}
        for c in (c for c in range(C) if dev[c] == d):
            links[c] = ChunkLinks(
                acts=fwd_links[c - 1].receive if c > 0 else None,
                act_sizes=entry.fwd[c - 1] if c > 0 else (),
                grads=bwd_links[c].receive if c < C - 1 else None,
                grad_sizes=entry.bwd[c + 1] if c < C - 1 else (),
                act_out=fwd_links[c] if c < C - 1 else None,
                grad_out=bwd_links[c - 1] if c > 0 else None)
        runners.append(DeviceRunner(d, entry, modules, links, B, loss_fn,
                                    inputs if dev[0] == d else None,
                                    targets if dev[-1] == d else None))
    owner = {(c, k): dev[c] for c in range(C) for k in "FBIW"}
    for item in order:
        action = str(item).rpartition(":")[2]
        act = parse_action(action)
        runners[owner[(act.chunk, act.kind)]].step(action)
    stats = [r.finish() for r in runners]
    for link in (*fwd_links, *bwd_links):
        if len(link):
            raise RuntimeError(f"{link.what}: {len(link)} messages were never consumed")
    counts: dict[tuple[int, str], int] = {}
    for c in range(C - 1):
        if dev[c] != dev[c + 1]:
            counts[(c, "act")] = fwd_links[c].count
            counts[(c, "grad")] = bwd_links[c].count
    return stats, counts

