"""One ``W`` over several ``I`` microbatches (docs/MODEL.md §1c; docs/EXECUTE.md, "I and W").

The runtime runs it as one kernel call over all the covered samples at every Linear,
convolution and LayerNorm cut (:func:`umpipe_bench.runtime.split_backward.weight_grad_many`);
float64 gradients equal the full-batch ones, with no ``autograd.grad`` call left where every
cut batches, and through ``autograd.grad`` per microbatch where one does not. The model charges
what the runtime does: a later chunk's ``W`` at its own size, the first chunk's (each covered
microbatch's whole backward) as the sum over the ``I`` microbatches it covers.
"""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from umpipe_bench.chunk_schedule import chunk_order  # noqa: E402
from umpipe_bench.chunk_torch import random_split_problem, simulate_plan  # noqa: E402
from umpipe_bench.chunkplan import ChunkPlan  # noqa: E402
from umpipe_bench.layout import group_layers  # noqa: E402
from umpipe_bench.runtime import chunk_executor  # noqa: E402
from umpipe_bench.runtime.chunk_executor import run_in_order  # noqa: E402
from umpipe_bench.runtime.chunk_job import chunk_entry  # noqa: E402
from umpipe_bench.runtime.split_backward import (  # noqa: E402
    input_grad,
    weight_grad_many,
)

F64 = torch.float64
SIZES = ((0, 2), (2, 3), (3, 7))  # three unequal I microbatches of 7 samples


class Mixed(nn.Module):
    """Every batchable kind: a convolution, a LayerNorm over a 3-d input, a Linear over a 3-d
    input (``addmm`` on the flattened rows), a Linear without bias (``mm``)."""

    def __init__(self) -> None:
        super().__init__()
        self.conv = nn.Conv2d(3, 4, 3, padding=1, dtype=F64)
        self.norm = nn.LayerNorm(16, dtype=F64)
        self.fc = nn.Linear(16, 5, dtype=F64)
        self.out = nn.Linear(5, 3, bias=False, dtype=F64)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        y = torch.relu(self.conv(x)).flatten(2)
        return self.out(torch.tanh(self.fc(self.norm(y))))


class Unbatched(nn.Module):
    """Cuts the batched path leaves alone: a weight used twice (one group of two cuts) and a
    parameter that scales its input (a ``mul`` cut)."""

    def __init__(self) -> None:
        super().__init__()
        self.a = nn.Linear(6, 6, dtype=F64)
        self.scale = nn.Parameter(torch.linspace(0.5, 1.5, 6, dtype=F64))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.a(torch.tanh(self.a(x))) * self.scale


def _grads(module: nn.Module, x: torch.Tensor, gy: torch.Tensor, monkeypatch) -> tuple:
    """Full-batch gradients, then the same from I per microbatch and one W over all three;
    the ``autograd.grad`` calls the W made."""
    params = list(module.parameters())
    xa = x.clone().requires_grad_(True)
    torch.autograd.backward(module(xa), gy)
    full = [p.grad.clone() for p in params]
    for p in params:
        p.grad = None
    works = []
    for a, b in SIZES:
        xb = x[a:b].clone().requires_grad_(True)
        _, work = input_grad(module(xb), xb, gy[a:b], params)
        works.append(work)
    assert all(p.grad is None for p in params)
    calls = []
    grad = torch.autograd.grad

    def counting(*args, **kw):
        calls.append(1)
        return grad(*args, **kw)

    monkeypatch.setattr(torch.autograd, "grad", counting)
    weight_grad_many(works)
    monkeypatch.setattr(torch.autograd, "grad", grad)
    return params, full, works, len(calls)


def test_one_w_over_three_microbatches_is_one_call_per_cut_and_exact(monkeypatch) -> None:
    g = torch.Generator().manual_seed(3)
    x = torch.randn(7, 3, 4, 4, generator=g, dtype=F64)
    gy = torch.randn(7, 4, 3, generator=g, dtype=F64)
    module = Mixed()
    params, full, works, calls = _grads(module, x, gy, monkeypatch)
    assert calls == 0  # every cut batched: no per-microbatch autograd walk
    assert all(w.groups == [] for w in works)  # every graph released
    for p, f in zip(params, full):
        assert not p.grad.requires_grad  # a plain gradient, not a node of some graph
        assert torch.allclose(p.grad, f, rtol=1e-12, atol=1e-14)


def test_cuts_that_do_not_batch_run_per_microbatch_and_stay_exact(monkeypatch) -> None:
    g = torch.Generator().manual_seed(4)
    x = torch.randn(7, 6, generator=g, dtype=F64)
    gy = torch.randn(7, 6, generator=g, dtype=F64)
    module = Unbatched()
    params, full, _, calls = _grads(module, x, gy, monkeypatch)
    assert calls == 2 * len(SIZES)  # the shared weight's group and the scale, per microbatch
    for p, f in zip(params, full):
        assert torch.allclose(p.grad, f, rtol=1e-12, atol=1e-14)


def test_the_executor_gives_one_w_all_the_microbatches_it_covers(monkeypatch) -> None:
    """A plan whose last chunk's W covers its four I microbatches hands the four to one
    :func:`weight_grad_many`; the first chunk's W covers two at a time."""
    seen = []
    many = chunk_executor.weight_grad_many

    def record(works):
        seen.append(len(works))
        many(works)

    monkeypatch.setattr(chunk_executor, "weight_grad_many", record)
    plan = ChunkPlan(D=2, layout="one", layers=(2, 2), mode="stash", split=True,
                     fwd=((2, 2, 2, 2), (2, 2, 2, 2)), bwd=((2, 2, 2, 2), (2, 2, 2, 2)),
                     wgt=((4, 4), (8,)))
    entry = chunk_entry("x", plan, [[0], [1], [2], [3]])
    torch.manual_seed(0)
    modules = {0: nn.Sequential(nn.Linear(4, 4, dtype=F64), nn.Tanh()),
               1: nn.Sequential(nn.Linear(4, 4, dtype=F64), nn.Tanh(), nn.Linear(4, 2, dtype=F64))}
    x = torch.randn(8, 4, dtype=F64)
    t = torch.randn(8, 2, dtype=F64)
    run_in_order(entry, [str(a) for a in chunk_order(plan).order], modules, 8,
                 lambda y, tt: ((y - tt) ** 2).sum(), x, t)
    assert sorted(seen) == [2, 2, 4]


def _w_durations(problem, plan) -> dict[str, float]:
    tl = simulate_plan(problem, plan)
    return {a: t1 - t0 for ops in tl.ops for a, t0, t1 in ops if "W" in a}


@pytest.mark.parametrize("mode", ["stash", "recompute"])
def test_the_model_charges_w_as_the_runtime_runs_it(mode) -> None:
    problem = random_split_problem(4, 8, seed=11)
    bwd = (2, 1, 3, 2)
    plan = ChunkPlan(D=2, layout="one", layers=(2, 2), mode=mode, split=True,
                     fwd=((2, 1, 3, 2),) * 2 if mode == "stash" else ((4, 4),) * 2,
                     bwd=(bwd, bwd), wgt=((3, 5), (8,)))
    chunks = group_layers(problem, plan.layers)
    w = chunks.tables().wbwd
    got = _w_durations(problem, plan)
    # the first chunk: each covered microbatch's whole backward, summed in sample order
    assert got["0W0"] == pytest.approx(w[0, 2] + w[0, 1], rel=1e-12)
    assert got["0W1"] == pytest.approx(w[0, 3] + w[0, 2], rel=1e-12)
    assert w[0, 3] != pytest.approx(w[0, 2] + w[0, 1], rel=1e-6)  # the two charges differ
    # a later chunk: one call over all its samples
    assert got["1W0"] == pytest.approx(w[1, 8], rel=1e-12)
