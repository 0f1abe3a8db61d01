"""The profiler on ``tiny-known``, whose per-layer cost is known by construction.

Layer i does ``work[i]`` matmuls of a (rows x hidden) sample by a (hidden x hidden) weight, so
its time is proportional to ``work[i]`` once the sizes are large enough to hide overheads. The
bounds are generous (expected ratios 4x and 16x, asserted at 1.5x and 4x). The ratio tests
time with the ``thread-cpu`` clock (CPU seconds of the compute thread): on a machine shared with
other jobs, wall-clock cells of a millisecond swing up to 8x with the neighbours' load, CPU time
does not. One wall-clock test checks only the 16:1 ordering, summed over sizes. No assertion
depends on absolute times.
"""

from __future__ import annotations

import json

import pytest

torch = pytest.importorskip("torch")

from umpipe_bench.problem import Problem, ProblemError  # noqa: E402
from umpipe_bench.profiler.profile import Grouping, LinkFigures, profile_model  # noqa: E402

HIDDEN, ROWS = 128, 16
CONFIG = {"hidden": HIDDEN, "rows": ROWS, "work": [1, 4, 1, 16]}
LINK = LinkFigures(latency=1e-4, bandwidth=1e9)
SAMPLE_BYTES = ROWS * HIDDEN * 4  # float32


def _profile(**kw):
    args = {"B": 8, "config": CONFIG, "repeats": 3, "link": LINK, "progress": False}
    args.update(kw)
    return profile_model("tiny-known", **args)


@pytest.fixture(scope="module")
def known() -> Problem:
    return _profile(repeats=5, clock="thread-cpu")


def test_wall_clock_ordering():
    p = _profile(repeats=5)
    assert p.provenance["clock"] == "wall"
    heavy = sum(p.fwd(3, m) + p.bwd(3, m) for m in p.sizes)
    light = sum(p.fwd(0, m) + p.bwd(0, m) for m in p.sizes)
    assert heavy > 2 * light  # 16 matmuls vs 1: expected ~16x


def test_shape_and_provenance(known):
    assert known.S == 4 and known.B == 8 and known.sizes == (1, 2, 4, 8)
    prov = known.provenance
    for key in (
        "model",
        "config",
        "layers_per_stage",
        "device",
        "torch",
        "threads",
        "date",
        "repeats",
        "optimizer",
        "how",
        "link",
    ):
        assert key in prov, key
    assert prov["model"] == "tiny-known" and prov["layers_per_stage"] == [1, 1, 1, 1]
    assert prov["config"] == CONFIG and prov["device"] == "cpu" and prov["threads"] == 1
    assert prov["source"] == "profiled" and prov["torch"] == torch.__version__
    for st in known.stages:
        noise = st.extra["noise"]
        assert len(noise["fwd"]) == len(known.sizes)
        assert all(x >= 1.0 for x in noise["fwd"] + noise["bwd"] + noise["rbwd"])


def test_expected_ordering_and_ratios(known):
    f = [known.fwd(s, 8) for s in range(4)]
    b = [known.bwd(s, 8) for s in range(4)]
    r = [known.rbwd(s, 8) for s in range(4)]
    # work 16 vs 1 and 4 vs 1: expected ratios 16 and 4
    assert f[3] > 4 * max(f[0], f[2]) and f[1] > 1.5 * max(f[0], f[2])
    assert b[3] > 4 * max(b[0], b[2]) and b[1] > 1.5 * max(b[0], b[2])
    assert r[3] > 4 * max(r[0], r[2]) and r[1] > 1.5 * max(r[0], r[2])
    assert f[3] > 2 * f[1] and b[3] > 2 * b[1] and r[3] > 2 * r[1]
    # backward does ~2x the forward's matmuls, recompute+backward ~3x: summed over the two
    # heavy layers and the two largest sizes so that one disturbed cell cannot decide it
    cells = [(s, m) for s in (1, 3) for m in (4, 8)]
    fs = sum(known.fwd(s, m) for s, m in cells)
    bs = sum(known.bwd(s, m) for s, m in cells)
    rs = sum(known.rbwd(s, m) for s, m in cells)
    assert bs > 1.3 * fs and rs > 1.8 * fs
    # more samples, more time: 8 samples of 16 matmuls vs 1
    assert known.fwd(3, 8) > 2 * known.fwd(3, 1)
    assert all(st.opt > 0 for st in known.stages)


def test_memory_and_boundary_bytes_by_construction(known):
    mem = [st.memory for st in known.stages]
    # autograd keeps the intermediates x@W, x@W@W, ...: work-1 per layer (input excluded);
    # the last stage also keeps (output - target) for the squared-error loss.
    assert [m.saved_act_bytes_per_sample for m in mem] == [
        0,
        3 * SAMPLE_BYTES,
        0,
        16 * SAMPLE_BYTES,
    ]
    assert all(m.input_bytes_per_sample == SAMPLE_BYTES for m in mem)
    weights = HIDDEN * HIDDEN * 4
    for m in mem:  # weights + grads + adam's two moments (+ its step counter)
        assert 4 * weights <= m.param_bytes <= 4 * weights + 64
    for link in known.links:
        assert link.act_bytes == SAMPLE_BYTES and link.grad_bytes == SAMPLE_BYTES
        assert link.latency == LINK.latency and link.bandwidth == LINK.bandwidth


def test_file_round_trip(known, tmp_path):
    path = tmp_path / "known.json"
    known.save(path)
    again = Problem.load(path)
    assert again.to_dict() == known.to_dict()
    assert json.loads(path.read_text())["schema"] == "umpipe-problem/1"
    assert again.fwd(3, 5) == known.fwd(3, 5)


def test_explicit_grouping_and_sgd():
    p = _profile(grouping=Grouping(layers_per_stage=(2, 2)), repeats=1, warmup=0, optimizer="sgd")
    assert p.S == 2 and p.provenance["layers_per_stage"] == [2, 2]
    assert [st.extra["layers"] for st in p.stages] == [[0, 2], [2, 4]]
    assert p.provenance["optimizer"] == "sgd" and p.provenance["grouping"] == "explicit"
    assert len(p.links) == 1


def test_balanced_grouping_is_deterministic(known, tmp_path):
    # layer 3 alone outweighs layers 0-2 together (16 vs 6): the balanced split is (3, 1),
    # whether the layer times come from a probe or from a one-layer-per-stage file.
    p = _profile(grouping=Grouping(stages=2), repeats=1, warmup=0)
    assert p.provenance["layers_per_stage"] == [3, 1]
    path = tmp_path / "per-layer.json"
    known.save(path)
    g = Grouping(stages=2, balance_from=str(path))
    q1 = _profile(grouping=g, repeats=1, warmup=0)
    q2 = _profile(grouping=g, repeats=1, warmup=0)
    assert q1.provenance["layers_per_stage"] == q2.provenance["layers_per_stage"] == [3, 1]
    assert "per-layer.json" in q1.provenance["balance"]


def test_thread_cpu_clock_needs_one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        with pytest.raises(ValueError, match="needs threads=1"):
            _profile(clock="thread-cpu", threads=None)
    finally:
        torch.set_num_threads(before)


def test_profile_leaves_the_thread_count_alone():
    before = torch.get_num_threads()
    _profile(threads=1, repeats=1, warmup=0)
    assert torch.get_num_threads() == before


def test_balance_from_rejects_another_config(known, tmp_path):
    path = tmp_path / "per-layer.json"
    known.save(path)
    other = dict(CONFIG, hidden=64)
    with pytest.raises(ProblemError, match="provenance 'config'"):
        _profile(config=other, grouping=Grouping(stages=2, balance_from=str(path)))


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"grouping": Grouping(layers_per_stage=(2, 1))}, "covers 3 layers; the model has 4"),
        ({"grouping": Grouping(stages=5)}, "cannot split 4 layers into 5"),
        ({"repeats": 0}, "repeats"),
        ({"dtype": "float8"}, "unknown dtype"),
        ({"optimizer": "lion"}, "unknown optimizer"),
        ({"clock": "sundial"}, "unknown clock"),
        ({"grouping": Grouping(layers_per_stage=(2, 2), stages=2)}, "not both"),
        ({"link": LinkFigures(-1.0, 1e9)}, "latency must be >= 0"),
        ({"link": LinkFigures(0.0, 0.0)}, "bandwidth > 0"),
        ({"config": {"hiden": 3}}, "unknown field 'hiden'"),
    ],
)
def test_bad_input_errors(kw, match):
    with pytest.raises(ValueError, match=match):
        _profile(**kw)


def test_cli_writes_a_problem(tmp_path, capsys):
    from umpipe_bench.cli import main

    out = tmp_path / "cli.json"
    rc = main(
        [
            "profile",
            "tiny-known",
            "--batch",
            "4",
            "--layers-per-stage",
            "3,1",
            "--repeats",
            "1",
            "--set",
            "hidden=32",
            "--set",
            "work=[1,2,1,8]",
            "--link-latency",
            "2e-4",
            "--link-bandwidth",
            "5e8",
            "--no-progress",
            "--malloc",
            "glibc",  # steady would set this test process's malloc for good
            "--out",
            str(out),
        ]
    )
    assert rc == 0
    p = Problem.load(out)
    assert p.name == "cli" and p.S == 2 and p.B == 4
    assert p.provenance["malloc"] == "glibc"
    assert p.provenance["config"]["work"] == [1, 2, 1, 8]
    assert p.links[0].latency == 2e-4
    assert "wrote" in capsys.readouterr().out


def test_cli_reports_bad_input(tmp_path, capsys):
    from umpipe_bench.cli import main

    rc = main(
        [
            "profile",
            "tiny-known",
            "-B",
            "4",
            "--link-latency",
            "1e-4",
            "--out",
            str(tmp_path / "x.json"),
        ]
    )
    assert rc == 2
    assert "--link-bandwidth" in capsys.readouterr().err


def test_link_calibration_between_two_processes():
    from umpipe_bench.profiler.link import calibrate_link

    sent = (4096, 1 << 20, 4 << 20)
    cal = calibrate_link(threads=1, message_bytes=sent, round_trips=5)
    assert cal.latency >= 0 and cal.bandwidth > 0
    # a busy machine may need a retry with 4x larger messages (recorded in details)
    k = cal.message_bytes[0] // sent[0]
    assert cal.message_bytes == tuple(k * b for b in sent)
    assert len(cal.details["failed"]) == {1: 0, 4: 1, 16: 2}[k]
    assert len(cal.one_way_median_s) == 3 and all(t > 0 for t in cal.one_way_median_s)
    assert "gloo" in cal.method
