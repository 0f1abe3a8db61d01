from __future__ import annotations

import json
import math

import pytest

from umpipe_bench.problem import SCHEMA, Problem, ProblemError
from umpipe_bench.registry import get_problem, problem_names
from umpipe_bench.synthetic import SIM_BATCHES, SIM_STAGES, synthetic_problem


def _valid() -> dict:
    return {
        "schema": SCHEMA,
        "name": "tiny",
        "B": 8,
        "sizes": [1, 2, 4, 8],
        "stages": [
            {"fwd": [1.0, 1.5, 2.5, 4.5], "bwd": [2.0, 3.0, 5.0, 9.0],
             "rbwd": [3.0, 4.5, 7.5, 13.5], "opt": 0.5},
            {"fwd": [1.0, 1.0, 2.0, 4.0], "bwd": [1.0, 2.0, 4.0, 8.0],
             "rbwd": [2.0, 3.0, 6.0, 12.0], "opt": 0.0},
        ],
        "links": [{"act_bytes": 100.0, "grad_bytes": 50.0, "latency": 0.1, "bandwidth": 1000.0}],
        "provenance": {"source": "test", "device": "cpu"},
    }


def test_interpolation_is_piecewise_linear_between_measured_sizes():
    p = Problem.from_dict(_valid())
    assert p.fwd(0, 1) == 1.0 and p.fwd(0, 2) == 1.5 and p.fwd(0, 4) == 2.5
    assert p.fwd(0, 3) == pytest.approx(2.0)  # halfway between 2 and 4
    assert p.fwd(0, 6) == pytest.approx(3.5)  # halfway between 4 (2.5) and 8 (4.5)
    assert p.bwd(1, 5) == pytest.approx(5.0)
    assert p.comm_act(0, 3) == pytest.approx(0.1 + 3 * 100 / 1000)
    assert p.comm_grad(0, 3) == pytest.approx(0.1 + 3 * 50 / 1000)
    t = p.tables()
    assert t.fwd.shape == (2, 9) and t.fwd[0, 0] == 0.0
    assert t.backward("recompute") is t.rbwd and t.backward("stash") is t.bwd
    with pytest.raises(ValueError, match="outside 1..B"):
        p.fwd(0, 9)


def test_round_trip_through_file(tmp_path):
    p = Problem.from_dict(_valid())
    path = tmp_path / "p.json"
    p.save(path)
    q = Problem.load(path)
    assert q == p
    assert q.to_dict() == p.to_dict()
    assert not [f for f in tmp_path.iterdir() if f.name.startswith(".")]  # no temp left


def _mutate(path: str, value):
    d = _valid()
    *head, last = path.split(".")
    tgt = d
    for k in head:
        tgt = tgt[int(k)] if k.isdigit() else tgt[k]
    if value is KeyError:
        del tgt[last]
    elif last.isdigit():
        tgt[int(last)] = value
    else:
        tgt[last] = value
    return d


@pytest.mark.parametrize(
    ("path", "value", "message"),
    [
        ("schema", "umpipe-problem/0", r"unknown schema version 'umpipe-problem/0'"),
        ("sizes", KeyError, r"field 'sizes': missing; expected a list"),
        ("sizes", [2, 4, 8], r"'sizes' must cover 1..B=8"),
        ("sizes", [1, 2, 4], r"'sizes' must cover 1..B=8"),
        ("sizes", [1, 4, 2, 8], r"strictly increasing"),
        ("stages.1.fwd", [1.0, 0.0, 2.0, 4.0], r"stage 1 field 'fwd' at size 2 must be a positive"),
        ("stages.0.bwd", [2.0, -3.0, 5.0, 9.0], r"stage 0 field 'bwd' at size 2"),
        ("stages.0.rbwd", [3.0, 4.5, 7.5], r"stage 0 field 'rbwd' has 3 values; expected one"),
        ("stages.1.opt", KeyError, r"field 'stages\[1\].opt': missing; expected a time"),
        ("stages.0.opt", float("nan"), r"field 'stages\[0\].opt': expected a time in seconds >= 0, got number nan"),
        ("links", [], r"'links' has 0 entries; expected S-1 = 1"),
        ("links.0.bandwidth", 0, r"field 'links\[0\].bandwidth': expected a bandwidth in bytes/s > 0, got number 0"),
        ("links.0.latency", KeyError, r"field 'links\[0\].latency': missing; expected a time in seconds >= 0"),
        ("B", 0, r"field 'B': expected an integer in 1..2048, got number 0"),
    ],
)
def test_bad_problem_files_name_file_field_and_stage(tmp_path, path, value, message):
    f = tmp_path / "bad.json"
    f.write_text(json.dumps(_mutate(path, value)))
    with pytest.raises(ProblemError, match=message) as exc:
        Problem.load(f)
    assert str(f) in str(exc.value)


def test_unreadable_and_non_json_files(tmp_path):
    with pytest.raises(ProblemError, match="cannot read"):
        Problem.load(tmp_path / "missing.json")
    f = tmp_path / "x.json"
    f.write_text("{not json")
    with pytest.raises(ProblemError, match="not valid JSON"):
        Problem.load(f)


def test_synthetic_generator_is_seeded_and_heterogeneous():
    a, b, c = synthetic_problem(8, 64, 0), synthetic_problem(8, 64, 0), synthetic_problem(8, 64, 1)
    assert a == b and a.to_dict() == b.to_dict()
    assert a.to_dict()["stages"] != c.to_dict()["stages"]
    fams = {st.extra["family"] for st in synthetic_problem(32, 64, 0).stages}
    assert fams == {"gpu", "cpu", "cache"}
    # stages disagree about their best per-sample forward size: the reason UEDP pays
    t = synthetic_problem(16, 64, 0).tables()
    best = {int((t.fwd[s, 1:] / range(1, 65)).argmin()) + 1 for s in range(16)}
    assert len(best) > 2
    for st in a.stages:
        assert all(math.isfinite(x) and x > 0 for x in st.fwd + st.bwd + st.rbwd)


def test_registry_has_every_sim_instance_and_lookup_errors_list_names():
    names = problem_names()
    for S in SIM_STAGES:
        for B in SIM_BATCHES:
            assert f"sim-s{S}-b{B}-s0" in names
    p = get_problem("SIM-S8-B64-S0")
    assert (p.S, p.B, p.name) == (8, 64, "sim-s8-b64-s0")
    with pytest.raises(KeyError, match=r"names: sim-s\{S\}-b\{B\}-s\{seed\}.*closest: "):
        get_problem("nope")


def test_split_backward_tables_all_stages_or_none(tmp_path):
    """The optional split-backward tables (docs/MODEL.md §1c) round-trip through a file and are
    refused in one line when a stage has only some of them, or some stages have none."""
    p = get_problem("sim-s4-b16-s0")
    d = p.to_dict()
    for st in d["stages"]:
        st.update(ibwd=[0.5 * x for x in st["bwd"]], ribwd=list(st["rbwd"]),
                  wbwd=[0.5 * x for x in st["bwd"]])
        st["memory"]["w_held_bytes_per_sample"] = 1.0
    q = Problem.from_dict(d)
    assert q.has_split_backward and not p.has_split_backward
    path = tmp_path / "s.json"
    q.save(path)
    assert Problem.load(path).to_dict() == q.to_dict()
    assert q.tables().input_backward("stash")[0, 3] == pytest.approx(0.5 * q.bwd(0, 3))
    partial = json.loads(json.dumps(d))
    del partial["stages"][1]["wbwd"]
    with pytest.raises(ProblemError, match=r"stage 1 has split-backward field\(s\)"):
        Problem.from_dict(partial)
    some = json.loads(json.dumps(d))
    for k in ("ibwd", "ribwd", "wbwd"):
        del some["stages"][2][k]
    with pytest.raises(ProblemError, match="every stage or none"):
        Problem.from_dict(some)
    short = json.loads(json.dumps(d))
    short["stages"][0]["ibwd"] = short["stages"][0]["ibwd"][:-1]
    with pytest.raises(ProblemError, match="stage 0 field 'ibwd' has"):
        Problem.from_dict(short)
    with pytest.raises(ProblemError, match="no split-backward costs"):
        p.tables().input_backward("recompute")
