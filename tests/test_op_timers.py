"""Per-op timers of the stage executor (umpipe_bench/runtime/executor.py), in one process.

A fake channel stands in for the links, so the re-chunking path (a consumer microbatch that
spans several producer microbatches, docs/MODEL.md §5) runs without torch.distributed.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from umpipe_bench.runtime.executor import StageContext, StageRunner


class FakeChannel:
    """Delivers producer microbatch ``seq`` as rows ``[start, stop)`` of a fixed tensor;
    records what is sent back."""

    def __init__(self, data: torch.Tensor) -> None:
        self.data = data
        self.sent: list[tuple[int, int, int, int]] = []

    def recv(self, kind: int, seq: int, start: int, stop: int, tail: Any, dt: Any,
             context: str = "") -> torch.Tensor:
        return self.data[start:stop].clone()

    def send(self, tensor: torch.Tensor, kind: int, seq: int, start: int, stop: int,
             expect: Any = None) -> None:
        self.sent.append((kind, seq, start, stop))

    def wait(self) -> None:
        pass


def _last_stage(up: FakeChannel) -> StageContext:
    torch.manual_seed(0)
    return StageContext(
        stage=1, S=2, B=8, module=nn.Linear(4, 3), loss_fn=lambda y, t: ((y - t) ** 2).sum(),
        targets=torch.zeros(8, 3), prev=up, in_tail=(4,), in_dtype=torch.float32,
    )


def test_every_op_has_timers_in_order() -> None:
    up = FakeChannel(torch.randn(8, 4))
    ops = [("F", 0, 0, 4), ("F", 1, 4, 8), ("B", 0, 0, 4), ("B", 1, 4, 8)]
    stats = StageRunner(_last_stage(up), "stash", [4, 4], [1, 1, 2, 4], None).run(ops)
    assert [(o.kind, o.index, o.start_sample, o.stop_sample) for o in stats.ops] == ops
    for prev, o in zip(stats.ops, stats.ops[1:], strict=False):
        assert prev.end <= o.start
    for o in stats.ops:
        assert o.start <= o.end
        assert 0.0 <= o.take <= o.end - o.start
        assert 0.0 <= o.send <= o.end - o.start
    # forwards re-chunk (F0 concatenates producer chunks 1, 1, 2), backwards send upstream
    assert stats.ops[0].take > 0.0
    assert [s[1:] for s in up.sent] == [(0, 0, 4), (1, 4, 8)]
    assert stats.ops[2].send > 0.0


def test_op_compute_sums_to_the_stage_compute() -> None:
    up = FakeChannel(torch.randn(8, 4))
    ops = [("F", 0, 0, 8), ("B", 0, 0, 8)]
    stats = StageRunner(_last_stage(up), "stash", [8], [8], None).run(ops)
    total = sum(o.end - o.start - o.wait for o in stats.ops)
    assert abs(total - stats.compute_s) < 1e-9
