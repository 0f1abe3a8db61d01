"""A co-runner: keep the machine's other cores as busy as a pipeline neighbour would.

On a CPU machine the stages of a pipeline share one memory system: while stage 0 computes on
core 0, stage 1 computes on core 1, and each runs slower than it does alone (shared caches and
memory bandwidth, lower all-core clocks). A profile measured one stage at a time with the other
cores idle therefore under-predicts a real run. With a co-runner the profiler measures under the
same kind of load: a separate process, one thread, training the same model on a small batch in a
loop until the timed rounds end (docs/MODEL.md §1: a problem records how each figure was measured).
"""

from __future__ import annotations

import multiprocessing as mp
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

__all__ = ["co_runner"]


def _loop(model: str, config: dict[str, Any], dtype: str, seed: int, m: int,
          ready: Any, stop: Any) -> None:
    import torch
    from torch import nn

    from umpipe_bench.problems.models import get_model
    from umpipe_bench.runtime.lifetime import die_with_parent

    die_with_parent()  # killed with the profile, even by SIGKILL
    torch.set_num_threads(1)
    tdtype = getattr(torch, dtype)
    spec = get_model(model)
    net = nn.Sequential(*spec.build(config, tdtype, seed + 1))
    x, y = spec.sample_batch(m, config, seed + 1, tdtype)
    ready.set()
    while not stop.is_set():
        spec.loss(net(x), y).backward()
        net.zero_grad(set_to_none=True)


@contextmanager
def co_runner(
    model: str, config: dict[str, Any], dtype: str, seed: int, m: int, enabled: bool = True,
) -> Iterator[None]:
    """Run the co-runner for the duration of the ``with`` block (no-op when not enabled)."""
    if not enabled:
        yield
        return
    ctx = mp.get_context("spawn")
    ready, stop = ctx.Event(), ctx.Event()
    proc = ctx.Process(target=_loop, args=(model, config, dtype, seed, m, ready, stop),
                       name="umpipe-co-runner", daemon=True)
    proc.start()
    try:
        if not ready.wait(timeout=300):
            raise RuntimeError("co-runner did not start within 300 s")
        yield
    except BaseException:  # an error, SIGINT or SIGTERM: no waiting for its round to end
        proc.kill()
        proc.join()
        raise
    finally:
        stop.set()
        proc.join(timeout=30)
        if proc.is_alive():
            proc.kill()
            proc.join()
