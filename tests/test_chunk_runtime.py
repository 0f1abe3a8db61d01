"""Chunk plans executed (docs/EXECUTE.md, "Chunk plans"): after one float64 iteration every
parameter gradient equals the single-process full-batch gradient, every stream between devices
carries exactly the producer's microbatches, for random chunk plans (layouts one, loop(v=2),
V on 2-3 devices; stash and recompute; split and unsplit; unequal P, Q, R per chunk; random
caps and w_caps) and for torch's schedules as chunk plans; a deliberately wrong plan is
caught; failures name the device and chunk, nothing hangs, nothing survives.

The fast tier runs the device executor of every device in one process, in the rule's global
order (:func:`umpipe_bench.runtime.chunk_executor.run_in_order`: the same code, streams in
memory); the slow tier launches one process per device through ``torchrun``.
"""

from __future__ import annotations

import json
import random
import re
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from torch import nn  # noqa: E402

from umpipe_bench.chunk_schedule import chunk_order  # noqa: E402
from umpipe_bench.chunk_torch import torch_plan  # noqa: E402
from umpipe_bench.chunkplan import ChunkPlan  # noqa: E402
from umpipe_bench.layout import balanced_counts  # noqa: E402
from umpipe_bench.problem import Link, Problem, StageCosts  # noqa: E402
from umpipe_bench.problems.models import get_model  # noqa: E402
from umpipe_bench.runtime.chunk_executor import run_in_order  # noqa: E402
from umpipe_bench.runtime.chunk_job import (  # noqa: E402
    chunk_entry,
    make_chunk_spec,
    stream_slots,
    streams,
)
from umpipe_bench.runtime.errors import PlanRefused  # noqa: E402
from umpipe_bench.runtime.reference import compare_gradients, reference_gradients  # noqa: E402
from umpipe_bench.runtime.split_backward import input_grad, weight_grad  # noqa: E402

MODEL = "tiny-mlp"
TORCH_SCHEDULES = ("gpipe", "1f1b", "interleaved-1f1b", "zb1p")


# ------------------------------------------------------------------------------ plans
def composition(rng: random.Random, B: int) -> tuple[int, ...]:
    out, run = [], 1
    for _ in range(B - 1):
        if rng.random() < 0.45:
            out.append(run)
            run = 0
        run += 1
    return (*out, run)


def coarsening(rng: random.Random, q: tuple[int, ...]) -> tuple[int, ...]:
    out, run = [], 0
    for i, m in enumerate(q):
        run += m
        if i == len(q) - 1 or rng.random() < 0.5:
            out.append(run)
            run = 0
    return tuple(out)


#: (layout, D): up to 4 chunks on 2-3 devices
SHAPES = (("one", 2), ("one", 3), ("loop", 2), ("v", 2))


def random_plan(rng: random.Random, layout: str, D: int, B: int, L: int, mode: str,
                split: bool) -> ChunkPlan:
    """Unequal P, Q (recompute), R (a random coarsening of Q) per chunk; random caps, w_caps,
    group and lags."""
    C = D if layout == "one" else 2 * D
    layers = list(balanced_counts(L, C))
    rng.shuffle(layers)
    fwd = tuple(composition(rng, B) for _ in range(C))
    bwd = fwd if mode == "stash" else tuple(composition(rng, B) for _ in range(C))
    wgt = tuple(coarsening(rng, q) for q in bwd) if split else None
    caps = None if rng.random() < 0.25 else tuple(rng.randint(1, 2 * B) for _ in range(D))
    w_caps = None if not split or rng.random() < 0.25 else tuple(
        rng.randint(0, B) for _ in range(D))
    group = None if rng.random() < 0.5 else rng.randint(1, B)
    lags = None if rng.random() < 0.6 else tuple(rng.randint(0, B // 2) for _ in range(C))
    return ChunkPlan(D=D, layout=layout, layers=tuple(layers), fwd=fwd, bwd=bwd, mode=mode,
                     split=split, wgt=wgt, caps=caps, w_caps=w_caps, group=group,
                     bwd_lag=lags)


def torch_plans(D: int, B: int, L: int) -> list[tuple[str, ChunkPlan]]:
    """torch's four reproduced schedules as chunk plans (M = 4), both modes."""
    out = []
    for name in TORCH_SCHEDULES:
        C = D if name in ("gpipe", "1f1b") else 2 * D
        for mode in ("stash", "recompute"):
            out.append((f"{name}-{mode}", torch_plan(name, D, 4, balanced_counts(L, C), B, mode)))
    return out


# ------------------------------------------------------------------------------ in one process
def run_here(plan: ChunkPlan, L: int, model: str = MODEL, config: dict | None = None,
             order: list[str] | None = None, check_complete: bool = True):
    """``plan`` on ``model`` in one process (every device, the rule's global order): the
    gradient mismatches against the reference, the messages per stream, the entry."""
    config = dict(config or {"layers": L})
    spec = get_model(model)
    entry = chunk_entry("x", plan, [[i] for i in range(L)])
    entry.check_complete = check_complete
    built = spec.build(config, torch.float64, 0)
    mods = {c: nn.Sequential(*(built[i] for i in entry.layers[c])) for c in range(entry.C)}
    x, y = spec.sample_batch(plan.B, config, 0, torch.float64)
    order = order if order is not None else [str(a) for a in chunk_order(plan).order]
    stats, counts = run_in_order(entry, order, mods, plan.B, spec.loss, x, y)
    ref_loss, ref = reference_gradients(model, config, entry.layers, plan.B)
    got = [{n: p.grad for n, p in mods[c].named_parameters()} for c in range(entry.C)]
    bad = compare_gradients(ref, got, rtol=1e-10, atol=1e-13, unit="chunk")
    loss = next(s.loss for s in stats if s.loss is not None)
    if abs(loss - ref_loss) > 1e-12 * abs(ref_loss):
        bad.append(f"loss {loss} vs {ref_loss}")
    return bad, counts, entry


def test_random_chunk_plans_give_the_full_batch_gradient_in_one_process() -> None:
    rng = random.Random(7)
    seen = set()
    n = 0
    for layout, D in SHAPES:
        for mode in ("stash", "recompute"):
            for split in (False, True):
                for _ in range(5):
                    B = rng.randint(2, 9)
                    L = (D if layout == "one" else 2 * D) + rng.randint(0, 2)
                    plan = random_plan(rng, layout, D, B, L, mode, split)
                    bad, counts, entry = run_here(plan, L)
                    assert not bad, f"{plan.to_dict()}: {bad}"
                    assert counts == {(s.boundary, s.kind): s.messages for s in streams(entry)}
                    seen.add((layout, D, mode, split, plan.is_equal()))
                    n += 1
    assert n == 80
    assert {(lay, D, m, s) for lay, D, m, s, eq in seen if not eq} == {
        (lay, D, m, s) for lay, D in SHAPES for m in ("stash", "recompute")
        for s in (False, True)}, "every cell of the matrix has an unequal plan"


GPT = {"seq": 4, "vocab": 32, "d_model": 16, "heads": 2, "mlp": 32, "blocks": 2}


@pytest.mark.parametrize("model, config, names", [
    ("tiny-mlp", {"layers": 6}, TORCH_SCHEDULES),
    ("gpt1-mini", GPT, ("zb1p",)),
    pytest.param("gpt1-mini", GPT, TORCH_SCHEDULES, marks=pytest.mark.slow),
])
def test_torch_schedules_as_chunk_plans_give_the_full_batch_gradient(model, config,
                                                                      names) -> None:
    """gpt1-mini: integer token inputs into the first chunk, LayerNorm, attention, residuals."""
    L = len(get_model(model).build(config, torch.float64, 0))
    for label, plan in torch_plans(2, 8, L):
        if label.rpartition("-")[0] not in names:
            continue
        bad, counts, entry = run_here(plan, L, model, config)
        assert not bad, f"{label}: {bad}"
        assert counts == {(s.boundary, s.kind): 4 for s in streams(entry)}, label


def test_a_w_that_never_runs_is_caught_by_the_gradient_comparison() -> None:
    """The test can fail: drop one W from the lists and the comparison names the chunk; the
    executor's own end-of-iteration check names device, chunk and pass."""
    plan = torch_plan("zb1p", 2, 4, (2, 1, 2, 1), 8)
    order = [str(a) for a in chunk_order(plan).order]
    victim = [a for a in order if a.startswith("2W")][-1]
    wrong = [a for a in order if a != victim]
    bad, _, _ = run_here(plan, 6, order=wrong, check_complete=False)
    assert bad and all(b.startswith("chunk 2: gradient of") for b in bad), bad
    with pytest.raises(RuntimeError, match=r"device 0, chunk 2: 3 of 4 W passes ran"):
        run_here(plan, 6, order=wrong)
    # and a list whose action comes before its input is refused, never waited for
    early = ["1F0", *[a for a in order if a != "1F0"]]
    with pytest.raises(RuntimeError, match=r"device 1, chunk 1, 1F0 .*microbatch 0 over "
                                           r"samples \[0, 2\) is needed but nothing is next"):
        run_here(plan, 6, order=early)


def test_split_backward_matches_the_full_backward_and_w_skips_the_input_path() -> None:
    """I + W give a full backward's gradients (shared weight, LayerNorm, residual, conv); W
    runs no node of the input path that has no parameter branch (a Tanh's backward)."""
    g = torch.Generator().manual_seed(0)
    lin = nn.Linear(6, 6, dtype=torch.float64)

    class Shared(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.a, self.norm = lin, nn.LayerNorm(6, dtype=torch.float64)

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.a(torch.tanh(self.a(x))) + self.norm(x)

    conv = nn.Sequential(nn.Conv2d(2, 3, 3, padding=1, dtype=torch.float64), nn.ReLU(),
                         nn.Conv2d(3, 2, 1, dtype=torch.float64))
    for module, shape in ((Shared(), (5, 6)), (conv, (2, 2, 4, 4))):
        x = torch.randn(*shape, generator=g, dtype=torch.float64)
        gy = torch.randn(*shape, generator=g, dtype=torch.float64)
        params = list(module.parameters())
        xa = x.clone().requires_grad_(True)
        torch.autograd.backward(module(xa), gy)
        full = [p.grad.clone() for p in params]
        for p in params:
            p.grad = None
        xb = x.clone().requires_grad_(True)
        dx, work = input_grad(module(xb), xb, gy, params)
        assert all(p.grad is None for p in params)  # I computes no parameter gradient
        weight_grad(work)
        assert torch.allclose(dx, xa.grad, rtol=1e-12, atol=1e-14)
        for p, f in zip(params, full):
            assert torch.allclose(p.grad, f, rtol=1e-12, atol=1e-14)
    mlp = nn.Sequential(nn.Linear(4, 4, dtype=torch.float64), nn.Tanh(),
                        nn.Linear(4, 4, dtype=torch.float64))
    x = torch.randn(3, 4, generator=g, dtype=torch.float64, requires_grad=True)
    y = mlp(x)
    tanh_node = next(n for n, _ in y.grad_fn.next_functions
                     if n is not None and type(n).__name__ == "TanhBackward0")
    _, work = input_grad(y, x, torch.ones_like(y), list(mlp.parameters()))
    ran = []
    tanh_node.register_prehook(lambda grads: ran.append(1))
    weight_grad(work)
    assert ran == [] and all(p.grad is not None for p in mlp.parameters())


# ------------------------------------------------------------------------------ streams
def test_each_stream_is_in_order_but_a_link_shared_by_streams_is_not() -> None:
    """Why one communicator per stream (docs/EXECUTE.md, "Message order"): in zb1p's lists
    (D = 2, M = 4) the order a device sends on one directed link differs from the order its
    peer needs the messages, while within every stream the two orders are the same (both are
    the producer's microbatch order)."""
    plan = torch_plan("zb1p", 2, 4, (1, 1, 1, 1), 8)
    entry = chunk_entry("x", plan, [[i] for i in range(4)])
    sent, needed = message_orders(entry)
    differs = False
    for pair in sent:
        assert sorted(sent[pair]) == sorted(needed[pair])
        differs |= sent[pair] != needed[pair]
        for key in {m[:2] for m in sent[pair]}:
            assert [m for m in sent[pair] if m[:2] == key] == \
                [m for m in needed[pair] if m[:2] == key]
    assert differs, "one FIFO per directed link would do here"


def message_orders(entry):
    """Per directed device pair: messages ``(boundary, kind, k)`` in the order the sender's
    list produces them and in the order the receiver's list first needs them."""
    ends = {}
    for c in range(entry.C):
        for kind, part in (("F", entry.fwd), ("G", entry.bwd)):
            a, out = 0, []
            for m in part[c]:
                out.append((a, a + m))
                a += m
            ends[(c, kind)] = out
    sent, needed = {}, {}
    for d, row in enumerate(entry.lists):
        for text in row:
            c, kind, j = _parse(text)
            g = "F" if kind == "F" else "G"
            if kind == "W":
                continue
            a, b = ends[(c, g)][j]
            out_c = c + 1 if g == "F" else c - 1
            if 0 <= out_c < entry.C and entry.devices[out_c] != d:
                boundary = c if g == "F" else c - 1
                sent.setdefault((d, entry.devices[out_c]), []).append(
                    (boundary, "act" if g == "F" else "grad", j))
            in_c = c - 1 if g == "F" else c + 1
            if 0 <= in_c < entry.C and entry.devices[in_c] != d:
                boundary = c - 1 if g == "F" else c
                kind_in = "act" if g == "F" else "grad"
                pair = (entry.devices[in_c], d)
                have = needed.setdefault(pair, [])
                taken = sum(1 for m in have if m[:2] == (boundary, kind_in))
                for k, (pa, _pb) in enumerate(ends[(in_c, g)]):
                    if k >= taken and pa < b:
                        have.append((boundary, kind_in, k))
    return sent, needed


def _parse(text: str) -> tuple[int, str, int]:
    i = next(i for i, ch in enumerate(text) if ch in "FBIW")
    return int(text[:i]), text[i], int(text[i + 1:])


def test_stream_slots_share_communicators_across_entries() -> None:
    loop = chunk_entry("a", torch_plan("zb1p", 2, 4, (1, 1, 1, 1), 8), [[i] for i in range(4)])
    one = chunk_entry("b", torch_plan("1f1b", 2, 4, (2, 2), 8), [[i] for i in range(4)])
    assert [(s.boundary, s.kind, s.src, s.dst) for s in streams(loop)] == [
        (0, "act", 0, 1), (0, "grad", 1, 0), (1, "act", 1, 0), (1, "grad", 0, 1),
        (2, "act", 0, 1), (2, "grad", 1, 0)]
    pairs, slots = stream_slots([loop, one])
    assert pairs == [(0, 1), (1, 0), (1, 0), (0, 1), (0, 1), (1, 0)]
    assert slots[1] == {(0, "act"): 0, (0, "grad"): 1}  # the second entry reuses the first's
    local = chunk_entry("v", torch_plan("zbv", 2, 4, (1, 1, 1, 1), 8), [[i] for i in range(4)])
    assert [s.boundary for s in streams(local)] == [0, 0, 2, 2]  # chunks 1, 2 share device 1


def test_specs_refuse_what_cannot_run() -> None:
    plan = torch_plan("zb1p", 2, 4, (1, 1, 1, 1), 8)
    groups = [1] * 4
    with pytest.raises(PlanRefused, match="B = 8 samples; the problem has B = 6"):
        make_chunk_spec(MODEL, {"layers": 4}, groups, 6, [("a", plan)])
    with pytest.raises(PlanRefused, match="D = 3 devices, the first plan for D = 2"):
        make_chunk_spec(MODEL, {"layers": 4}, groups, 8, [
            ("a", plan), ("b", torch_plan("gpipe", 3, 4, (2, 1, 1), 8))])
    with pytest.raises(PlanRefused, match="covers 4 stages; the problem has 5"):
        make_chunk_spec(MODEL, {"layers": 5}, [1] * 5, 8, [("a", plan)])
    with pytest.raises(PlanRefused, match="share the label 'a'"):
        make_chunk_spec(MODEL, {"layers": 4}, groups, 8, [("a", plan), ("a", plan)])
    spec = make_chunk_spec(MODEL, {"layers": 4}, [[0, 1], [2], [3]], 8,
                           [("a", torch_plan("1f1b", 2, 4, (2, 1), 8))])
    assert spec.entries[0].layers == [[0, 1, 2], [3]]  # chunk 0: problem stages [0, 1], [2]


# ------------------------------------------------------------------------------ command line
def split_problem(path: Path, L: int = 6, B: int = 8) -> Problem:
    """A per-layer tiny-mlp problem with split tables (costs made up, model real)."""
    sizes = (1, 2, 4, B)
    prob = Problem(
        name=f"tiny-mlp-l{L}", B=B, sizes=sizes,
        stages=tuple(StageCosts(fwd=tuple(1e-4 * m for m in sizes),
                                bwd=tuple(2e-4 * m for m in sizes),
                                rbwd=tuple(3e-4 * m for m in sizes),
                                ibwd=tuple(1e-4 * m for m in sizes),
                                ribwd=tuple(2e-4 * m for m in sizes),
                                wbwd=tuple(1e-4 * m for m in sizes), opt=1e-5)
                     for _ in range(L)),
        links=(Link(act_bytes=128.0, grad_bytes=128.0, latency=1e-4, bandwidth=1e9),) * (L - 1),
        provenance={"model": MODEL, "config": {"layers": L}, "layers_per_stage": [1] * L,
                    "dtype": "float64", "source": "test", "device": "cpu"},
    ).validate()
    prob.save(path)
    return prob


@pytest.mark.parametrize("edit, needle", [
    (lambda d: (d.clear(), d.update(torch_plan("gpipe", 3, 4, (2, 2, 2), 8).to_dict())),
     "--devices 2: chunk plan file '.*' is for D = 3 devices \\(its field 'D'\\)"),
    (lambda d: d.update(layers=[2, 2, 1, 2]), "field 'layers' \\[2, 2, 1, 2\\] covers 7 layers"),
    (lambda d: d["wgt"].__setitem__(0, [3, 5]), "field 'wgt\\[0\\]': \\[3, 5\\] must be a "
                                                "coarsening"),
    (lambda d: d.update(lyaers=[1]), "unknown field; did you mean 'layers'"),
])
def test_cli_refuses_a_bad_chunk_plan_in_one_line(tmp_path, capsys, edit, needle) -> None:
    from umpipe_bench.cli import main

    ppath = tmp_path / "p.json"
    split_problem(ppath)
    data = torch_plan("zb1p", 2, 4, (2, 1, 2, 1), 8).replace(
        wgt=((4, 4), (8,), (2, 2, 4), (8,))).to_dict()
    edit(data)
    plan = tmp_path / "plan.json"
    plan.write_text(json.dumps(data))
    t0 = time.monotonic()
    rc = main(["execute", "--problem", str(ppath), "--devices", "2", "--plan", str(plan)])
    err = capsys.readouterr().err
    assert rc == 2 and len(err.strip().splitlines()) == 1, err
    assert re.search(needle, err), err
    assert time.monotonic() - t0 < 10


# ------------------------------------------------------------------------------ processes
def launch_spec(tmp_path: Path, runs, L: int, B: int, **settings):
    from umpipe_bench.runtime.chunk_execution import STAGE_ARGS
    from umpipe_bench.runtime.launcher import launch, run_processes

    for key, value in (("dtype", "float64"), ("iters", 1), ("warmup", 0),
                       ("optimizer", "none"), ("timeout_s", 60.0), ("dump_grads", True)):
        settings.setdefault(key, value)
    spec = make_chunk_spec(MODEL, {"layers": L}, [1] * L, B, runs, **settings)
    return spec, lambda **kw: (launch(spec, tmp_path, deadline_s=kw.pop("deadline_s", 150),
                                      stage_args=STAGE_ARGS, **kw), run_processes(spec.run_id))


def matrix_runs(layout: str, D: int, B: int, L: int, seed: int) -> list[tuple[str, ChunkPlan]]:
    """Two random unequal plans per (mode, split), then torch's schedules of that layout."""
    rng = random.Random(seed)
    runs = []
    for mode in ("stash", "recompute"):
        for split in (False, True):
            for n in range(2):
                plan = random_plan(rng, layout, D, B, L, mode, split)
                assert not plan.is_equal()
                runs.append((f"rand-{mode}-{'split' if split else 'fused'}-{n}", plan))
    if layout == "one":
        runs += [(label, plan) for label, plan in torch_plans(D, B, L)
                 if label.startswith(("gpipe", "1f1b"))]
    elif layout == "loop":
        runs += [(label, plan) for label, plan in torch_plans(D, B, L)
                 if label.startswith(("interleaved", "zb1p"))]
    else:
        runs += [(f"zbv-{mode}", torch_plan("zbv", D, 4, balanced_counts(L, 2 * D), B, mode))
                 for mode in ("stash", "recompute")]
    return runs


@pytest.mark.runtime
@pytest.mark.parametrize("layout, D", SHAPES)
def test_chunk_plans_on_processes_give_the_full_batch_gradient(tmp_path, layout, D) -> None:
    """One launch per layout: random unequal plans in both modes, split and not, and torch's
    schedules as chunk plans; gradients, loss and exact message counts per stream. The loop
    launch also runs a plan whose list lacks a W: the comparison must name its chunk. D = 3
    receives inline (no receive threads): both receive paths run."""
    from umpipe_bench.runtime.chunk_execution import gradient_check

    B, L = 8, 7 if layout == "one" else 6
    runs = matrix_runs(layout, D, B, L, seed=SHAPES.index((layout, D)))
    spec, go = launch_spec(tmp_path, runs, L, B, prefetch=D != 3)
    wrong = None
    if layout == "loop":
        spec.entries.append(chunk_entry("no-W", torch_plan("zb1p", 2, 4, (2, 1, 2, 1), 8),
                                        [[i] for i in range(L)]))
        wrong = spec.entries[-1]
        row = wrong.lists[0]
        row.remove([a for a in row if a.startswith("2W")][-1])
        wrong.check_complete = False
    result, survivors = go()
    assert survivors == []
    checks = dict(gradient_check(spec, result, tmp_path, rtol=1e-10, atol=1e-13))
    for label, bad in checks.items():
        if wrong is not None and label == wrong.label:
            assert bad and all(b.startswith("chunk 2: gradient of") for b in bad), bad
        else:
            assert not bad, f"{label}: {bad}"
    for row in result["entries"]:
        entry = next(e for e in spec.entries if e.label == row["label"])
        assert [(m["boundary"], m["kind"], m["sent"], m["received"]) for m in row["messages"]] \
            == [(s.boundary, s.kind, s.messages, s.messages) for s in streams(entry)]
    assert len(checks) == len(runs) + (wrong is not None)


def _fault(tmp_path: Path, fault: str, **settings):
    from umpipe_bench.runtime.errors import StageFailure

    runs = [("zb1p", torch_plan("zb1p", 2, 4, (2, 1, 2, 1), 8)),
            ("v", torch_plan("zbv", 2, 4, (2, 1, 2, 1), 8, "recompute"))]
    spec, go = launch_spec(tmp_path, runs, 6, 8, iters=2, dump_grads=False, **settings)
    t0 = time.monotonic()
    with pytest.raises(StageFailure) as info:
        go(extra_env={"UMPIPE_FAULT": fault})
    from umpipe_bench.runtime.launcher import run_processes

    assert run_processes(spec.run_id) == [], "processes of the failed run survived"
    return info.value, time.monotonic() - t0


@pytest.mark.runtime
def test_a_device_that_raises_is_named_with_its_chunk(tmp_path) -> None:
    err, elapsed = _fault(tmp_path, "raise:1:5")
    lists = torch_plan("zb1p", 2, 4, (2, 1, 2, 1), 8)
    action = chunk_order(lists).names()[1][5]
    assert err.stage == 1 and elapsed < 60
    assert f"device 1, chunk {action[0]}, {action}" in str(err)
    assert "injected fault at device 1, action 5" in str(err)


@pytest.mark.runtime
def test_a_device_that_dies_or_hangs_ends_the_run(tmp_path) -> None:
    err, elapsed = _fault(tmp_path / "exit", "exit:0:3")
    assert err.stage == 0 and "died" in str(err) and elapsed < 60
    err, elapsed = _fault(tmp_path / "hang", "hang:1:2", timeout_s=4.0)
    assert err.stage == 1 and elapsed < 60


@pytest.mark.runtime
def test_cli_executes_chunk_plans_and_checks_their_gradients(tmp_path, capsys) -> None:
    from umpipe_bench.cli import main
    from umpipe_bench.runtime.report import COLUMNS

    ppath = tmp_path / "p.json"
    split_problem(ppath)
    torch_plan("zb1p", 2, 4, (2, 1, 2, 1), 8).save(tmp_path / "zb1p.json")
    uneq = torch_plan("1f1b", 2, 4, (3, 3), 8, "recompute").replace(
        fwd=((2, 6), (5, 3)), bwd=((8,), (1, 1, 6)))
    uneq.save(tmp_path / "uneq.json")
    plans = ["--plan", str(tmp_path / "zb1p.json"), "--vs", str(tmp_path / "uneq.json")]
    csv_path = tmp_path / "rows.csv"
    rc = main(["execute", "--problem", str(ppath), "--devices", "2", *plans, "--iters", "2",
               "--warmup", "1", "--json", "--csv", str(csv_path)])
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["rows"]
    assert [r["plan"] for r in rows] == ["zb1p", "uneq"]
    assert rows[0]["schedule"] == "chunk" and rows[1]["plan_kind"] == "one C=2 unequal recompute"
    for r in rows:
        assert r["predicted_time"] > 0 and r["measured_median"] > 0
    assert csv_path.read_text().splitlines()[0].split(",") == list(COLUMNS)
    rc = main(["execute", "--problem", str(ppath), "--devices", "2", *plans, "--check-grads"])
    text = capsys.readouterr().out
    assert rc == 0 and "zb1p: ok" in text and "uneq: ok" in text
    assert "2 of 2 plans give the full-batch gradient" in text


@pytest.mark.runtime
def test_cli_runs_chunk_plans_inside_an_existing_torchrun_launch(tmp_path) -> None:
    """`torchrun -m umpipe_bench.cli.execute --devices D`: every rank runs its device."""
    import os
    import subprocess
    import sys

    ppath = tmp_path / "p.json"
    split_problem(ppath)
    torch_plan("zb1p", 2, 4, (2, 1, 2, 1), 8).save(tmp_path / "zb1p.json")
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc-per-node=2",
         "-m", "umpipe_bench.cli.execute", "--problem", str(ppath), "--devices", "2",
         "--plan", str(tmp_path / "zb1p.json"), "--iters", "2", "--warmup", "0",
         "--timeout", "60", "--json"],
        capture_output=True, text=True, timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1  # rank 0 reports
    assert [r["plan"] for r in json.loads(lines[0])["rows"]] == ["zb1p"]
