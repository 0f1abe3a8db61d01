"""Checked point-to-point transfers between neighbouring stages (docs/MODEL.md §5).

Every tensor travels as two messages: a fixed-size int64 header (magic, kind, producer
microbatch index, sample range, dtype, shape) and the payload, on two tags. Both sides know
from the plan (and the one-sample shape probe) exactly what each message must be:

* the sender checks its tensor against that before sending, and refuses (a
  :class:`ShapeMismatchError` naming stage, microbatch and shapes) rather than put a
  wrong-sized payload on the wire;
* the receiver posts the header and the payload receives together (one round trip, not two)
  into buffers of the expected size, and checks the header before the payload is used.

gloo silently half-fills a too-large buffer and aborts the process on a too-small one, so a
payload must never differ from the size its receiver expects: the sender-side check
guarantees it as long as both ranks run the same plan, which the worker verifies once at
start-up (a digest of the run spec, compared across ranks). The one-sample shape probe, whose
shape nobody knows in advance, receives the header first and sizes the payload from it.

Sends are asynchronous (``isend``); the sender keeps each tensor alive until its send is done.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Sequence
from typing import Any

import torch
import torch.distributed as dist

from .errors import PeerLostError, ShapeMismatchError

__all__ = ["KIND_ACT", "KIND_GRAD", "KIND_PROBE", "Channel", "Prefetcher", "describe"]

KIND_ACT = 1
KIND_GRAD = 2
KIND_PROBE = 3
_KIND_NAMES = {KIND_ACT: "activation", KIND_GRAD: "gradient", KIND_PROBE: "shape probe"}

_MAGIC = 0x554D5042  # "UMPB"
_PAYLOAD_TAG = 8  # payload tag = kind + 8; header tag = kind
_HEADER_LEN = 16
_MAX_DIMS = _HEADER_LEN - 7
_DTYPE_CODES: list[torch.dtype] = [
    torch.float32,
    torch.float64,
    torch.float16,
    torch.bfloat16,
    torch.int64,
    torch.int32,
    torch.uint8,
    torch.bool,
]


def describe(shape: Sequence[int], dtype: torch.dtype | None = None) -> str:
    """``(4, 128, 256) float32``: how shapes appear in error messages."""
    dims = "(" + ", ".join(str(int(d)) for d in shape) + ("," if len(shape) == 1 else "") + ")"
    return dims if dtype is None else f"{dims} {str(dtype).removeprefix('torch.')}"


class Channel:
    """This stage's link to one neighbouring stage (one rank per stage)."""

    def __init__(
        self,
        stage: int,
        peer: int,
        device: torch.device,
        groups: dict[int, Any] | None = None,
    ) -> None:
        self.stage = stage
        self.peer = peer
        self.device = device
        #: process group per message kind (None: the default group). Activations and gradients
        #: on separate groups keep the two directions on separate communicators: with NCCL a
        #: send of activations queued before a receive of gradients on one stream could
        #: otherwise wait for a peer doing the opposite (ranks are global ranks in every group).
        self.groups = groups or {}
        self._pending: list[tuple[list[Any], tuple[torch.Tensor, ...]]] = []
        #: fault injection (tests): "shape": the next tensor sent carries one extra sample;
        #: "header": the next header names the wrong microbatch
        self.corrupt_next = ""

    # ------------------------------------------------------------------ sending
    def send(
        self,
        tensor: torch.Tensor,
        kind: int,
        seq: int,
        start: int,
        stop: int,
        expect: tuple[Sequence[int], torch.dtype | None] | None = None,
    ) -> None:
        """Send header + payload asynchronously; the tensor is kept alive until :meth:`wait`.

        ``expect`` is ``(per-sample shape, dtype)`` the receiver expects (None: the probe).
        """
        payload = tensor.detach()
        fault = ""
        if kind != KIND_PROBE:
            fault, self.corrupt_next = self.corrupt_next, ""
        if fault == "shape":
            payload = torch.cat([payload, payload[:1]])
        payload = payload.contiguous()
        name = _KIND_NAMES[kind]
        what = f"{name} microbatch {seq} (samples [{start}, {stop})) for stage {self.peer}"
        if expect is not None:
            want = (stop - start, *expect[0])
            if tuple(payload.shape) != want or (
                expect[1] is not None and payload.dtype != expect[1]
            ):
                raise ShapeMismatchError(
                    self.stage,
                    f"refusing to send {what}",
                    describe(want, expect[1]),
                    describe(payload.shape, payload.dtype),
                )
        if payload.dim() > _MAX_DIMS:
            raise ValueError(
                f"stage {self.stage}: cannot send a {payload.dim()}-dim tensor (max {_MAX_DIMS})"
            )
        if payload.dtype not in _DTYPE_CODES:
            raise ValueError(f"stage {self.stage}: cannot send dtype {payload.dtype}")
        fields = [_MAGIC, kind, seq, start, stop, _DTYPE_CODES.index(payload.dtype), payload.dim()]
        fields += list(payload.shape) + [0] * (_MAX_DIMS - payload.dim())
        if fault == "header":
            fields[2] += 1
        header = torch.tensor(fields, dtype=torch.int64, device=self.device)
        group = self.groups.get(kind)
        try:
            works = [
                dist.isend(header, dst=self.peer, group=group, tag=kind),
                dist.isend(payload, dst=self.peer, group=group, tag=kind + _PAYLOAD_TAG),
            ]
        except Exception as exc:
            raise PeerLostError(self.stage, self.peer, f"sending {what}", exc) from exc
        self._pending.append((works, (header, payload)))
        if len(self._pending) > 8:
            self._pending = [
                (w, t) for (w, t) in self._pending if not all(x.is_completed() for x in w)
            ]

    def wait(self) -> None:
        """Block until every send issued so far has completed."""
        pending, self._pending = self._pending, []
        for works, _tensors in pending:
            for w in works:
                try:
                    w.wait()
                except Exception as exc:
                    raise PeerLostError(self.stage, self.peer, "completing a send", exc) from exc

    # ------------------------------------------------------------------ receiving
    def recv(
        self,
        kind: int,
        seq: int,
        start: int,
        stop: int,
        tail: Sequence[int] | None,
        dtype: torch.dtype | None,
        context: str = "",
    ) -> torch.Tensor:
        """Receive the producer's microbatch ``seq`` covering samples ``[start, stop)``.

        ``tail`` is the per-sample shape (None: accept any, used only by the shape probe).
        """
        name = _KIND_NAMES[kind]
        what = f"{name} microbatch {seq} (samples [{start}, {stop})) from stage {self.peer}"
        if context:
            what += f" {context}"
        group = self.groups.get(kind)
        header = torch.empty(_HEADER_LEN, dtype=torch.int64, device=self.device)
        payload: torch.Tensor | None = None
        try:
            hwork = dist.irecv(header, src=self.peer, group=group, tag=kind)
            if tail is not None and dtype is not None:
                # the size is known: post the payload receive now (the sender checked it)
                payload = torch.empty((stop - start, *tail), dtype=dtype, device=self.device)
                pwork = dist.irecv(payload, src=self.peer, group=group, tag=kind + _PAYLOAD_TAG)
            hwork.wait()
        except Exception as exc:
            raise PeerLostError(
                self.stage, self.peer, f"receiving the header of {what}", exc
            ) from exc
        h = [int(x) for x in header.tolist()]
        if h[0] != _MAGIC or not 0 <= h[5] < len(_DTYPE_CODES) or not 0 <= h[6] <= _MAX_DIMS:
            raise ShapeMismatchError(self.stage, what, "a umpipe message header", f"{h}")
        got_kind, got_seq, got_start, got_stop = h[1], h[2], h[3], h[4]
        got_dtype = _DTYPE_CODES[h[5]]
        got_shape = tuple(h[7 : 7 + h[6]])
        if (got_kind, got_seq, got_start, got_stop) != (kind, seq, start, stop):
            raise ShapeMismatchError(
                self.stage,
                what,
                f"{name} microbatch {seq} over samples [{start}, {stop})",
                f"{_KIND_NAMES.get(got_kind, f'kind {got_kind}')} microbatch {got_seq} over "
                f"samples [{got_start}, {got_stop}) (the stages disagree about the plan)",
            )
        if tail is not None:
            want = (stop - start, *tail)
            if got_shape != want or (dtype is not None and got_dtype != dtype):
                raise ShapeMismatchError(
                    self.stage, what, describe(want, dtype), describe(got_shape, got_dtype)
                )
        try:
            if payload is None:
                payload = torch.empty(got_shape, dtype=got_dtype, device=self.device)
                dist.recv(payload, src=self.peer, group=group, tag=kind + _PAYLOAD_TAG)
            else:
                pwork.wait()
        except Exception as exc:
            raise PeerLostError(self.stage, self.peer, f"receiving {what}", exc) from exc
        return payload


class Prefetcher:
    """Receive one iteration's incoming stream on a background thread, in producer order.

    The consumer's schedule fixes which producer microbatches arrive and in what order, so a
    thread can post each receive (header and payload) as soon as the previous one is done:
    transfers then overlap the consumer's compute, as the model assumes (sends are async,
    docs/MODEL.md §4), instead of starting only when the consumer asks. Errors (a shape mismatch, a
    lost peer) are handed to the consumer when it reaches that microbatch. gloo only: NCCL
    wants every rank to issue its operations from one thread in a consistent order.
    """

    def __init__(
        self,
        channel: Channel,
        kind: int,
        ranges: Sequence[tuple[int, int]],
        tail: Sequence[int],
        dtype: torch.dtype | None,
    ) -> None:
        self._q: queue.SimpleQueue[torch.Tensor | BaseException] = queue.SimpleQueue()
        self._args = (channel, kind, list(ranges), tuple(tail), dtype)
        self._thread = threading.Thread(
            target=self._loop, name=f"umpipe-recv-{channel.stage}-from-{channel.peer}", daemon=True
        )
        self._thread.start()

    def _loop(self) -> None:
        channel, kind, ranges, tail, dtype = self._args
        try:
            for k, (a, b) in enumerate(ranges):
                self._q.put(channel.recv(kind, k, a, b, tail, dtype))
        except BaseException as exc:  # handed to the consumer thread
            self._q.put(exc)

    def get(self, k: int, a: int, b: int, context: str = "") -> torch.Tensor:
        """Producer microbatch ``k`` (the consumer asks in order); ``context`` names the op
        that needed it, added to the message of a failed receive."""
        item = self._q.get()
        if isinstance(item, BaseException):
            if context and item.args and isinstance(item.args[0], str):
                item.args = (f"{item.args[0]} [needed {context}]", *item.args[1:])
            raise item
        return item

    def join(self) -> None:
        self._thread.join()
