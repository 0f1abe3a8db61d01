"""The split backward (docs/MODEL.md §1c): I + W give the full backward's gradients, the bytes
held between I and W on modules whose answer is known by construction (and as torch's own
``stage_backward_input`` holds them), the tables in problem files, ``--split-backward-into``.

No assertion depends on a time.
"""

from __future__ import annotations

import gc
import json
import weakref

import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from umpipe_bench.cli import main  # noqa: E402
from umpipe_bench.problem import Problem  # noqa: E402
from umpipe_bench.profiler.profile import (  # noqa: E402
    LinkFigures,
    profile_model,
)
from umpipe_bench.profiler.rig import prepare_rigs, stage_backward, stage_forward  # noqa: E402
from umpipe_bench.profiler.split import (  # noqa: E402
    backward_input,
    backward_weight,
    measure_split_memory,
)

pytestmark = pytest.mark.slow  # the fast tier (-m "not slow") leaves this module out

F64 = 8  # bytes per float64


class Shared(nn.Module):
    """x -> x @ W three times: one weight used in three places."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.weight = nn.Parameter(torch.randn(d, d) / d**0.5)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(3):
            x = x @ self.weight
        return x


class Residual(nn.Module):
    """LayerNorm(x + MLP(x)): a residual branch and a parameterised normalisation on top."""

    def __init__(self, d: int) -> None:
        super().__init__()
        self.fc, self.out, self.ln = nn.Linear(d, 2 * d), nn.Linear(2 * d, d), nn.LayerNorm(d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.ln(x + self.out(torch.tanh(self.fc(x))))


class ConvReLU(nn.Module):
    def __init__(self, c: int) -> None:
        super().__init__()
        self.conv = nn.Conv2d(c, c, 3, padding=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return torch.relu(self.conv(x))


def _mse(out: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    return ((out - target) ** 2).sum()


def _rigs(layers: list[nn.Module], shape: tuple[int, ...], B: int = 4):
    torch.manual_seed(0)
    layers = [layer.double() for layer in layers]
    inputs = torch.randn((B, *shape), dtype=torch.float64)
    with torch.no_grad():
        h = inputs
        for layer in layers:
            h = layer(h)
    targets = torch.randn(h.shape, dtype=torch.float64)
    return prepare_rigs(layers, (1,) * len(layers), inputs, targets, optimizer="sgd", seed=0)


def _grads(rig, split: bool, m: int = 3, start: int = 1):
    """Parameter gradients and the input gradient of one backward of samples [start, start+m)."""
    rig.module.zero_grad(set_to_none=True)
    x, out = stage_forward(rig, m, _mse, start)
    if split:
        state = backward_input(rig, x, out, m, start)
        del out
        backward_weight(state)
    else:
        stage_backward(rig, out, m, start)
    return [p.grad.clone() for p in rig.module.parameters()], x.grad


CASES = {
    "mlp": ([nn.Linear(6, 8), nn.Sequential(nn.Linear(8, 16), nn.GELU(), nn.Linear(16, 8)),
             nn.Linear(8, 5)], (6,)),
    "shared": ([Shared(6), Shared(6), Shared(6)], (2, 6)),
    "residual": ([nn.Linear(5, 6), Residual(6), Residual(6)], (3, 5)),
    "conv": ([ConvReLU(2), ConvReLU(2), ConvReLU(2)], (2, 5, 5)),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_input_plus_weight_pass_equals_full_backward(case):
    layers, shape = CASES[case]
    for rig in _rigs(layers, shape):  # stage 0: no input gradient; last stage: the loss
        full_p, full_x = _grads(rig, split=False)
        split_p, split_x = _grads(rig, split=True)
        assert len(full_p) == len(split_p) > 0
        for a, b in zip(full_p, split_p):
            torch.testing.assert_close(b, a, rtol=1e-12, atol=1e-14)
        if rig.needs_input_grad:
            torch.testing.assert_close(split_x, full_x, rtol=1e-12, atol=1e-14)
        else:
            assert full_x is None and split_x is None


def test_input_pass_leaves_parameter_gradients_to_the_weight_pass():
    rig = _rigs(*CASES["residual"])[1]
    rig.module.zero_grad(set_to_none=True)
    x, out = stage_forward(rig, 2, _mse)
    state = backward_input(rig, x, out, 2)
    assert x.grad is not None
    assert all(p.grad is None for p in rig.module.parameters())
    backward_weight(state)
    assert all(p.grad is not None for p in rig.module.parameters())


def test_w_held_single_linear_keeps_only_its_output_gradient():
    """A Linear stage: W needs the input (the stage input, not counted) and the gradient at its
    output; no saved activation is held between I and W."""
    rigs = _rigs([nn.Linear(6, 7), nn.Linear(7, 9), nn.Linear(9, 4)], (6,))
    fig = measure_split_memory(rigs[1], 4, _mse)
    assert fig.saved == 0 and fig.held_saved == 0 and fig.w_reads == 0
    assert fig.held_grads == 9 * F64 and fig.held == 9 * F64


def test_w_held_linear_gelu_linear_by_construction():
    """fc1 (8 -> 16), GELU, fc2 (16 -> 8). Saved: GELU's input a and fc2's input h (16 each).
    Held after I: both (GELU's node hangs under fc2's, which W still needs) + the gradients at
    the outputs of fc2 (8) and fc1 (16). W reads h only (fc1's input is the stage input)."""
    rigs = _rigs(*CASES["mlp"])
    fig = measure_split_memory(rigs[1], 4, _mse)
    assert fig.saved == 32 * F64
    assert fig.held_saved == 32 * F64
    assert fig.held_grads == (8 + 16) * F64
    assert fig.held == 56 * F64
    assert fig.w_reads == 16 * F64


def test_w_held_last_stage_drops_the_loss_side():
    """Last stage Linear(8 -> 5) + squared error: the loss' saved (out - target) is freed after
    I (the output side of the graph goes); the gradient at the Linear's output stays."""
    rigs = _rigs(*CASES["mlp"])
    fig = measure_split_memory(rigs[2], 4, _mse)
    assert fig.saved == 5 * F64
    assert fig.held_saved == 0 and fig.held_grads == 5 * F64


def test_w_held_stage_zero_holds_everything():
    """Stage 0 computes nothing in I (its input needs no gradient): all saved bytes wait for W."""
    rigs = _rigs([nn.Sequential(nn.Linear(6, 8), nn.Tanh()), nn.Linear(8, 5)], (6,))
    fig = measure_split_memory(rigs[0], 4, _mse)  # Tanh's output (8) is the saved tensor
    assert fig.saved == 8 * F64 and fig.held_saved == fig.saved and fig.held_grads == 0


def _torch_held(rig, m: int) -> tuple[float, float]:
    """Saved bytes alive and kept-gradient bytes after torch's own ``stage_backward_input``."""
    from torch.distributed.pipelining._backward import stage_backward_input

    skip = {p.untyped_storage().data_ptr() for p in rig.module.parameters()}
    skip.add(rig.inputs.untyped_storage().data_ptr())
    boxes = []

    class Box:
        __slots__ = ("__weakref__", "t")

        def __init__(self, t):
            self.t = t.detach()

    def pack(t):
        b = Box(t)
        boxes.append(weakref.ref(b))
        return b

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda b: b.t.detach()):
        x, out = stage_forward(rig, m, _mse)
        grads = None if rig.grad_out is None else [rig.grad_out[:m]]
        _, groups = stage_backward_input([out], grads, [x], rig.module.parameters())
        del out
        gc.collect()

        def nbytes(ts):
            seen = {t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in ts}
            return sum(v for k, v in seen.items() if k not in skip)

        held = nbytes([r().t for r in boxes if r() is not None])
        kept = nbytes([g for grp in groups for tup in grp.get("grads", ()) for g in tup
                       if g is not None])
    return held / m, kept / m


@pytest.mark.parametrize("case", ["mlp", "residual", "conv"])
def test_held_bytes_match_torch_stage_backward_input(case):
    for rig in _rigs(*CASES[case])[1:]:
        mine = measure_split_memory(rig, 4, _mse)
        held, kept = _torch_held(rig, 4)
        assert (mine.held_saved, mine.held_grads) == (held, kept), rig.index


LINK = LinkFigures(latency=1e-4, bandwidth=1e9)
TINY = {"hidden": 32, "rows": 4, "work": [1, 2, 1]}


@pytest.fixture(scope="module")
def tiny_file(tmp_path_factory):
    p = profile_model("tiny-known", B=4, config=TINY, repeats=1, warmup=0, link=LINK,
                      progress=False, locality=False)
    path = tmp_path_factory.mktemp("split") / "tiny.json"
    p.save(path)
    return path


def test_profile_with_split_tables_round_trip(tmp_path):
    p = profile_model("tiny-known", B=4, config=TINY, repeats=1, warmup=0, link=LINK,
                      progress=False, locality=False, split_backward=True)
    assert p.has_split_backward
    for st in p.stages:
        assert len(st.ibwd) == len(st.ribwd) == len(st.wbwd) == len(p.sizes)
        assert st.memory.w_held_bytes_per_sample is not None
        assert set(st.extra["split_backward"]["memory"]) >= {"held_saved_bytes_per_sample",
                                                 "w_reads_bytes_per_sample"}
    assert "ibwd" in p.provenance["how"] and "w_held" in p.provenance["how"]
    path = tmp_path / "p.json"
    p.save(path)
    q = Problem.load(path)
    assert q.to_dict() == p.to_dict() and q.has_split_backward
    # the middle stage (work 2): held = 1 saved intermediate + 2 kept output gradients
    rows, hidden = TINY["rows"], TINY["hidden"]
    assert q.stages[1].memory.w_held_bytes_per_sample == 3 * rows * hidden * 4
    assert q.tables().wbwd.shape == (3, 5)


def test_split_backward_into_keeps_every_other_number(tiny_file, tmp_path):
    before = json.loads(tiny_file.read_text())
    target = tmp_path / "t.json"
    target.write_text(tiny_file.read_text())
    assert main(["profile", "--split-backward-into", str(target), "--repeats", "1",
                 "--warmup", "0", "--no-progress"]) == 0
    after = json.loads(target.read_text())
    sb = after["provenance"].pop("split_backward")
    assert sb["rounds"] == 1 and len(sb["run_bwd"]) == 3 and len(sb["loadavg_start"]) == 3
    for st_after in after["stages"]:
        for k in ("ibwd", "ribwd", "wbwd"):
            assert len(st_after.pop(k)) == len(before["sizes"])
        st_after["memory"].pop("w_held_bytes_per_sample")
        st_after["extra"].pop("split_backward")
    assert after == before


def test_split_tables_from_another_run_are_put_on_the_files_footing():
    """Drift between runs: each cell is scaled by the file's bwd over the run's own bwd, so
    I / B and W / B keep the ratios measured within one run."""
    import dataclasses

    from umpipe_bench.profiler.profile import scale_split_to_file
    from umpipe_bench.registry import get_problem

    p = get_problem("sim-s4-b16-s0")
    stages = tuple(dataclasses.replace(st, ibwd=tuple(0.5 * b for b in st.bwd),
                                       ribwd=tuple(0.7 * b for b in st.bwd),
                                       wbwd=tuple(0.6 * b for b in st.bwd)) for st in p.stages)
    run_bwd = [[2.0 * b for b in st.bwd] for st in p.stages]  # the split run: twice as slow
    q = dataclasses.replace(p, stages=stages,
                            provenance={**p.provenance, "split_backward": {"run_bwd": run_bwd}})
    r = scale_split_to_file(q)
    for st, raw in zip(r.stages, stages):
        assert st.ibwd == pytest.approx([x / 2 for x in raw.ibwd], rel=1e-12)
        assert st.wbwd == pytest.approx([x / 2 for x in raw.wbwd], rel=1e-12)
        assert st.bwd == raw.bwd and st.fwd == raw.fwd
    assert r.provenance["split_backward"]["scaled"]
    assert scale_split_to_file(r).to_dict() == r.to_dict()  # once only


def test_split_backward_into_refuses_a_synthetic_problem(tiny_file, tmp_path, capsys):
    data = json.loads(tiny_file.read_text())
    data["provenance"] = {"source": "synthetic"}
    path = tmp_path / "syn.json"
    path.write_text(json.dumps(data))
    text = path.read_text()
    assert main(["profile", "--split-backward-into", str(path)]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "'profiled'" in err
    assert path.read_text() == text


@pytest.mark.parametrize("argv", [
    ["--split-backward-into", "{missing}"],
    ["tiny-known", "--split-backward-into", "{file}"],
    ["--split-backward-into", "{notjson}"],
])
def test_split_backward_into_errors_are_one_line(argv, tiny_file, tmp_path, capsys):
    notjson = tmp_path / "x.json"
    notjson.write_text("{")
    argv = [a.format(missing=tmp_path / "none.json", file=tiny_file, notjson=notjson)
            for a in argv]
    assert main(["profile", *argv]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("umpipe-bench profile: error:")


def test_profile_without_model_names_what_is_missing(tmp_path, capsys):
    assert main(["profile", "--out", str(tmp_path / "p.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "MODEL" in err and "--batch" in err


def test_chunk_derivation_rule_by_construction():
    """umpipe_bench/profiler/chunk_derivation.py (scripts/chunk_derivation.py): balanced
    counts, and the derived chunk costs (sums; the first chunk's W takes its other layers' I
    too)."""
    from umpipe_bench.profiler import chunk_derivation as mod
    assert mod.balanced_counts(14, 4) == [4, 4, 3, 3] and mod.balanced_counts(16, 2) == [8, 8]
    one = {k: [[float(10 * s + i + 1)] for s in range(4)] for i, k in enumerate(mod.KINDS)}
    # layer s: fwd 10s+1, bwd 10s+2, rbwd 10s+3, ibwd 10s+4, wbwd 10s+5
    assert mod.derived(one, 2, 4, 0, "bwd") == 22 + 32
    assert mod.derived(one, 0, 2, 0, "ibwd") == 4
    assert mod.derived(one, 0, 2, 0, "wbwd") == 5 + (14 + 15)
    assert mod.derived(one, 0, 2, 0, "fwd") == 1 + 11
