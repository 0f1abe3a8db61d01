"""Re-chunking a stream of producer microbatches into the consumer's sizes (docs/MODEL.md §2, §5).

Samples flow in index order in both directions, so a consumer always asks for the next
contiguous sample range: it concatenates whole producer chunks and slices at most one of them.
The same buffer keeps a recompute-mode stage's stashed inputs, which backward microbatches
consume (again in ascending order) with their own sizes.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Callable, Sequence
from itertools import accumulate

import torch

__all__ = ["ChunkStream", "SampleBuffer"]


class SampleBuffer:
    """Samples ``[begin, end)`` held as a queue of tensors along dim 0 (the batch dim)."""

    def __init__(self, begin: int = 0) -> None:
        self.begin = begin
        self.end = begin
        self._chunks: deque[torch.Tensor] = deque()

    def append(self, chunk: torch.Tensor) -> None:
        self._chunks.append(chunk)
        self.end += int(chunk.shape[0])

    def take(self, start: int, stop: int) -> torch.Tensor:
        """Samples ``[start, stop)``; ``start`` must be the first held sample.

        Everything before ``stop`` is released: consumers move strictly forward.
        """
        if start != self.begin or not start < stop <= self.end:
            raise RuntimeError(
                f"internal: samples [{start}, {stop}) requested from a buffer holding "
                f"[{self.begin}, {self.end}); consumers must ask for contiguous ascending ranges"
            )
        pieces: list[torch.Tensor] = []
        need = stop - start
        while need:
            head = self._chunks[0]
            n = int(head.shape[0])
            if n <= need:
                pieces.append(self._chunks.popleft())
                need -= n
            else:
                pieces.append(head[:need])
                self._chunks[0] = head[need:]
                need = 0
        self.begin = stop
        return pieces[0] if len(pieces) == 1 else torch.cat(pieces)


class ChunkStream:
    """The incoming stream of one direction, read in the consumer's own sample ranges.

    ``receive(k, start, stop)`` returns producer microbatch ``k`` (samples ``[start, stop)``,
    sizes from the producer's partition); it is called only when a requested range needs it,
    so a consumer waits for exactly the last producer microbatch it needs (docs/MODEL.md §4).
    """

    def __init__(
        self, sizes: Sequence[int], receive: Callable[[int, int, int], torch.Tensor]
    ) -> None:
        ends = list(accumulate(sizes))
        self._ranges = list(zip([0, *ends[:-1]], ends))
        self._receive = receive
        self._next = 0
        self._buf = SampleBuffer()

    def take(self, start: int, stop: int) -> torch.Tensor:
        while self._buf.end < stop:
            if self._next >= len(self._ranges):
                raise RuntimeError(
                    f"internal: samples up to {stop} requested but the producer sends only "
                    f"{self._buf.end}"
                )
            a, b = self._ranges[self._next]
            self._buf.append(self._receive(self._next, a, b))
            self._next += 1
        return self._buf.take(start, stop)

    @property
    def exhausted(self) -> bool:
        """True once every producer microbatch has been received and consumed."""
        return self._next == len(self._ranges) and self._buf.begin == self._buf.end
