"""The runtime calibration (umpipe_bench/runtime/calibration.py, scripts/runtime_calibration.py)
and the device simulator's message charge: known by construction."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import numpy as np
import pytest

from umpipe_bench.devsim import DevSimError, simulate_devices
from umpipe_bench.layout import chunk_devices, group_layers
from umpipe_bench.problem import Link, Problem, StageCosts
from umpipe_bench.registry import get_problem
from umpipe_bench.runtime.calibration import (
    KINDS,
    Observation,
    calibrated_problem,
    decompose,
    design,
    message_charge,
    observations,
    runtime_model,
    schedule_probes,
)
from umpipe_bench.torch_schedules.best import best_choice, compositions, divisors, simulate_chunks

ROOT = Path(__file__).resolve().parents[1]
_ATTR = {"F": "fwd", "B": "bwd", "I": "ibwd", "W": "wbwd"}
_KINDS_OF = {"gpipe": "FB", "1f1b": "FB", "interleaved-1f1b": "FB", "looped-bfs": "FB",
             "zb1p": "FIW", "zbv": "FIW", "dualpipev": "FBIW"}


def _random_problem(L: int = 6, B: int = 4, seed: int = 0) -> Problem:
    """L layers with distinct random costs of every kind at sizes 1, 2, 4."""
    rng = np.random.default_rng(seed)
    sizes = (1, 2, 4)
    stages = []
    for _ in range(L):
        f, b, i, w = (tuple(float(x) for x in rng.uniform(1e-3, 9e-3, 3)) for _ in range(4))
        stages.append(StageCosts(fwd=f, bwd=b, rbwd=tuple(x + y for x, y in zip(f, b)), opt=1e-4,
                                 ibwd=i, ribwd=tuple(x + y for x, y in zip(f, i)), wbwd=w))
    links = tuple(Link(1000.0 * (s + 1), 500.0 * (s + 1), 1e-5, 1e9) for s in range(L - 1))
    return Problem(name="rand", B=B, sizes=sizes, stages=tuple(stages), links=links,
                   provenance={"source": "test"}).validate()


def _observed(P: Problem) -> list[Observation]:
    """Every chunk action of the design, costed as group_layers adds the layers up."""
    obs = []
    for e in design(P.S, P.B):
        G = group_layers(P, e["partition"])
        m = P.B // e["M"]
        ends = np.cumsum([0, *e["partition"]])
        for c, st in enumerate(G.stages):
            for kind in _KINDS_OF[e["schedule"]]:
                obs.append(Observation(kind, int(ends[c]), int(ends[c + 1]), m,
                                       getattr(st, _ATTR[kind])[list(P.sizes).index(m)]))
    return obs


def test_design_covers_every_split_at_both_microbatch_counts():
    assert design(6, 16, probes=True) == design(6, 16) + schedule_probes(6, 16)
    es = design(6, 16)
    assert [e["partition"] for e in es if e["schedule"] == "gpipe" and e["M"] == 2] == \
        [[k, 6 - k] for k in range(1, 6)]
    assert [e["partition"] for e in es if e["schedule"] == "zb1p" and e["M"] == 4] == \
        [[k, 1, 1, 4 - k] for k in range(1, 4)]
    assert {e["M"] for e in design(6, 6)} == {2}  # M must divide B
    with pytest.raises(Exception, match="at least 4 layers"):
        design(3, 16)


def test_decompose_recovers_known_per_layer_costs_exactly():
    P = _random_problem()
    costs = decompose(_observed(P), P.S)
    assert sorted(costs) == [1, 2]  # B / M for M = 4, 2
    for m, per in costs.items():
        si = list(P.sizes).index(m)
        for kind in KINDS:
            want = [getattr(st, _ATTR[kind])[si] for st in P.stages]
            assert per[kind] == pytest.approx(want, rel=1e-9, abs=1e-12), (m, kind)


def test_calibrated_problem_reproduces_the_observations_and_scales_other_sizes():
    P = _random_problem(seed=1)
    obs = _observed(P)
    Q = calibrated_problem(P, decompose(obs, P.S), (2e-4, 3e-12), {"how": "test"})
    for o in obs:  # group_layers of the calibrated problem gives back every observation
        part = [o.a, o.b - o.a, P.S - o.b] if 0 < o.a else [o.b, P.S - o.b]
        part = [n for n in part if n]
        c = 1 if o.a > 0 else 0
        got = getattr(group_layers(Q, part).stages[c], _ATTR[o.kind])[list(P.sizes).index(o.m)]
        assert got == pytest.approx(o.seconds, rel=1e-9)
    # size 4 was not calibrated: the profile times the layer's calibrated / profiled ratio,
    # which is 1 here (the observations are the profile's own costs)
    assert [st.fwd[2] for st in Q.stages] == pytest.approx([st.fwd[2] for st in P.stages])
    assert all(st.bwd_far == 1.0 for st in Q.stages)
    assert runtime_model(Q) == (2e-4, 3e-12)
    assert runtime_model(P) == (0.0, 0.0)


def test_observations_take_the_median_per_action():
    e = {"schedule": "gpipe", "M": 2, "partition": [2, 3]}
    its = [{"ops": [("F", 0, 0.0, t), ("F", 0, 1.0, 1.0 + t), ("wait", -1, 2.0, 3.0)]}
           for t in (0.1, 0.3, 0.2)]
    obs = observations([e], 8, [{"gpipe:M2:2-3": its}, {}])
    assert obs == [Observation("F", 0, 2, 4, pytest.approx(0.2))]


def test_message_charge_recovers_a_line():
    a, b = 4e-4, 2.5e-10
    rows = [{"bytes": n, "per_exchange_s": 2 * (a + b * n)} for n in (4096, 131072, 5242880)]
    got = message_charge(rows)
    assert got == pytest.approx((a, b), rel=1e-9)
    with pytest.raises(Exception, match="at least 2"):
        message_charge(rows[:1])


# ----------------------------------------------------------------- the simulator's charge
def _two_layers() -> Problem:
    st = StageCosts(fwd=(1.0,), bwd=(2.0,), rbwd=(3.0,), opt=0.0)
    return Problem(name="two", B=1, sizes=(1,), stages=(st, st),
                   links=(Link(100.0, 50.0, 0.5, 1e12),)).validate()


def test_a_message_charge_adds_to_both_ends_of_every_message():
    """Two chunks on two devices, one microbatch: two messages (activation, gradient), every
    action on the critical path: a charge c per end adds exactly 4c, b per byte adds b times the
    bytes of each end."""
    p, lists = _two_layers(), [["0F0", "0B0"], ["1F0", "1B0"]]
    base = simulate_devices(p, (0, 1), lists, (1,)).iteration_time
    assert base == pytest.approx(1 + 0.5 + 1 + 2 + 0.5 + 2, rel=1e-9)
    c = 0.25
    assert simulate_devices(p, (0, 1), lists, (1,), message_cpu=(c, 0.0)).iteration_time \
        == pytest.approx(base + 4 * c, rel=1e-15)
    b = 1e-3
    assert simulate_devices(p, (0, 1), lists, (1,), message_cpu=(0.0, b)).iteration_time \
        == pytest.approx(base + b * (100 + 100 + 50 + 50))
    one = [["0F0", "1F0", "1B0", "0B0"]]  # one device: no message, no charge
    assert simulate_devices(p, (0, 0), one, (1,), message_cpu=(c, b)).iteration_time == \
        simulate_devices(p, (0, 0), one, (1,)).iteration_time
    for bad in ((-1.0, 0.0), (0.0, float("inf")), (1.0,), "x"):
        with pytest.raises(DevSimError, match="message_cpu"):
            simulate_devices(p, (0, 1), lists, (1,), message_cpu=bad)


def test_a_zero_charge_is_bit_identical():
    from umpipe_bench.torch_schedules import torch_orders

    p = get_problem("sim-s8-b16-s1")
    for name, kind, parts in (("interleaved-1f1b", "loop", (2, 2, 2, 2)),
                              ("zbv", "v", (1, 3, 3, 1))):
        if name == "zbv" and not p.has_split_backward:
            continue
        G = group_layers(p, parts)
        lists = torch_orders(name, 2, 4, 2)
        a = simulate_devices(G, chunk_devices(kind, 2, 2), lists, (4,) * 4)
        b = simulate_devices(G, chunk_devices(kind, 2, 2), lists, (4,) * 4,
                             message_cpu=(0.0, 0.0))
        assert a.iteration_time == b.iteration_time and a.ops == b.ops


def test_the_exact_search_stays_exact_with_a_message_charge():
    from umpipe_bench.torch_schedules import torch_orders

    q = get_problem("sim-s8-b16-s1")
    msg = (2e-3, 1e-9)
    got = best_choice(q, "gpipe", 2, kind="one", split=False, orders=torch_orders,
                      message_cpu=msg)
    brute = min(simulate_chunks(q, c, "one", 2, 1, M, "stash", torch_orders("gpipe", 2, M, None),
                                0.0, msg).iteration_time
                for M in divisors(q.B) for c in compositions(q.S, 2))
    assert got.T == brute
    plain = best_choice(q, "gpipe", 2, kind="one", split=False, orders=torch_orders)
    assert plain.T < got.T


# ----------------------------------------------------------------------------- the CLIs
def _script(name: str):
    sys.path.insert(0, str(ROOT / "scripts"))
    import importlib

    return importlib.import_module(name)


def test_bad_message_cpu_is_one_line_and_exit_2(capsys):
    mts = _script("measure_torch_schedules")
    for bad in ("1,a", "1", "-1,0", "1,2,3"):
        assert mts.main(["--predict", "sim-s8-b16-s1", f"--message-cpu={bad}"]) == 2
        err = capsys.readouterr().err.strip()
        assert "--message-cpu" in err and "\n" not in err


def test_fit_without_the_run_is_exit_2(tmp_path, capsys):
    rc = _script("runtime_calibration")
    cal = tmp_path / "cal.json"
    cal.write_text(json.dumps({"workload": "sim-s8-b16-s1", "entries": design(8, 16)}))
    ex = tmp_path / "ex.json"
    ex.write_text("[]")
    assert rc.main(["fit", str(cal), "--ops", str(tmp_path), "--exchange", str(ex),
                    "--out", str(tmp_path / "o.json")]) == 2
    err = capsys.readouterr().err.strip()
    assert "ops.r0.json" in err and "\n" not in err
    assert rc.main(["run", str(cal), "--rounds", "0", "--out", str(tmp_path)]) == 2


def test_calibrated_recompute_tables_stay_consistent():
    """Calibrated I larger than profiled: the first chunk's recompute I (group_layers) must stay
    positive, so the recompute tables follow the calibrated F, B and I."""
    P = _random_problem(seed=2)
    obs = [Observation(o.kind, o.a, o.b, o.m, o.seconds * (3.0 if o.kind == "I" else 1.0))
           for o in _observed(P)]
    Q = calibrated_problem(P, decompose(obs, P.S), (0.0, 0.0), {})
    for st in Q.stages:
        assert st.rbwd == pytest.approx([f + b for f, b in zip(st.fwd, st.bwd)])
        assert st.ribwd == pytest.approx([f + i for f, i in zip(st.fwd, st.ibwd)])
    assert min(group_layers(Q, (4, 2)).stages[0].ribwd) > 0


def test_merge_keeps_each_entry_once(tmp_path, capsys):
    mts = _script("measure_torch_schedules")
    a = {"schedule": "gpipe", "torch_class": "ScheduleGPipe", "M": 2, "partition": [4, 4],
         "v": 1, "T_pred": 1.0}
    b = {**a, "M": 4, "T_pred": 2.0}
    f1, f2 = tmp_path / "a.json", tmp_path / "b.json"
    f1.write_text(json.dumps({"workload": "gpt1-mini-b16", "entries": [a]}))
    f2.write_text(json.dumps({"workload": {"model": "gpt1-mini", "B": 16, "config": {
        "seq": 16, "vocab": 4096, "d_model": 256, "heads": 4, "mlp": 1024, "blocks": 12}},
        "entries": [{**a, "T_pred": 9.0}, b]}))
    got = mts.merge_entries([str(f1), str(f2)])
    assert got == {"workload": "gpt1-mini-b16", "entries": [a, b]}
    f2.write_text(json.dumps({"workload": "vgg16-mini-b16", "entries": [b]}))
    assert mts.main(["--merge", str(f1), str(f2)]) == 2
    assert "workload" in capsys.readouterr().err


def test_combine_reports_the_runtime_calibrated_model(tmp_path):
    """'Measured' medians that are the simulator's T on a runtime-calibrated problem (its
    message charge read from the file): the page's runtime-calibrated row ranks them at 1 with
    zero error and names the charge."""
    from umpipe_bench.runtime import torch_entries, torch_report

    d = get_problem("sim-s8-b16-s1").to_dict()
    d["provenance"] = {**(d.get("provenance") or {}),
                       "runtime_calibration": {"message_cpu": [1e-3, 2e-10]}}
    rt = tmp_path / "sim-s8-b16-s1.runtime.json"
    rt.write_text(json.dumps(d))
    picks = torch_entries.predicted_entries(str(rt), "stash")
    assert picks["message_cpu"] == [1e-3, 2e-10]
    rows = [{"label": f"{e['schedule']}:M{e['M']}:{'-'.join(map(str, e['partition']))}",
             "torch_class": e["torch_class"], "M": e["M"], "partition": e["partition"],
             "v": e["v"], "T_pred": None} for e in picks["entries"]]
    Ts = torch_entries.predict_rows(str(rt), rows, 0.0)
    assert Ts != torch_entries.predict_rows(str(rt), rows, 0.0, (0.0, 0.0))  # the charge acts
    for r, T in zip(rows, Ts):
        r.update(median=T, low=T, high=T, n=1)
    run = tmp_path / "w.run.json"
    run.write_text(json.dumps({"command": "x", "date": "d", "load_before": "0",
                               "load_after": "0", "workload": {"name": "sim-s8-b16-s1"},
                               "summary": {"rows": rows}}))
    page = tmp_path / "page.md"
    assert torch_report.combine([str(run)], str(page), None, "cmd") == 0
    line = next(x for x in page.read_text().splitlines() if "| runtime-calibrated |" in x)
    cells = [x.strip() for x in line.split("|")]
    assert cells[4] == "1.00 ms + 0.20 ms/MB" and cells[5].startswith("1.000") \
        and cells[6].startswith("1.000") and cells[8] == "1.00" and cells[9] == "0.0 %"


def test_combine_keeps_sittings_apart_and_finds_the_profile_one_folder_up(tmp_path):
    """Runs of one workload in two folders (a sitting's folder below the profile's) are two
    sections, each with its own runtime-calibrated model; the sitting's as-profiled model reads
    the profile one folder up (not the registry problem of the same name): 'measured' medians
    that are the simulator's T on that profile (every cost doubled) give it zero error."""
    from umpipe_bench.runtime import torch_entries, torch_report

    d = get_problem("sim-s8-b16-s1").to_dict()
    for st in d["stages"]:
        for k in ("fwd", "bwd", "ibwd", "wbwd", "rbwd", "ribwd"):
            if st.get(k) is not None:
                st[k] = [2 * x for x in st[k]]
    prof = tmp_path / "sim-s8-b16-s1.json"
    prof.write_text(json.dumps(d))
    sit = tmp_path / "2026-01-01"
    sit.mkdir()
    (sit / "sim-s8-b16-s1.runtime.json").write_text(json.dumps(d))
    picks = torch_entries.predicted_entries(str(prof), "stash")
    rows = [{"label": f"{e['schedule']}:M{e['M']}:{'-'.join(map(str, e['partition']))}",
             "torch_class": e["torch_class"], "M": e["M"], "partition": e["partition"],
             "v": e["v"], "T_pred": None} for e in picks["entries"]]
    for r, T in zip(rows, torch_entries.predict_rows(str(prof), rows, 0.0)):
        r.update(median=T, low=T, high=T, n=1)
    runs = []
    for folder in (tmp_path, sit):
        run = folder / "sim-s8-b16-s1.run1.json"
        run.write_text(json.dumps({"command": "x", "date": "d", "load_before": "0",
                                   "load_after": "0", "workload": {"name": "sim-s8-b16-s1"},
                                   "summary": {"rows": rows}}))
        runs.append(str(run))
    page = tmp_path / "page.md"
    assert torch_report.combine(runs, str(page), None, "cmd") == 0
    text = page.read_text()
    assert "\n## sim-s8-b16-s1\n" in text and "\n## sim-s8-b16-s1 (2026-01-01)\n" in text
    rows_of = [[c.strip() for c in x.split("|")] for x in text.splitlines()
               if x.startswith("| sim-s8-b16-s1")]
    assert [(r[1], r[2]) for r in rows_of] == [
        ("sim-s8-b16-s1", "as profiled"), ("sim-s8-b16-s1 (2026-01-01)", "as profiled"),
        ("sim-s8-b16-s1 (2026-01-01)", "runtime-calibrated")]
    assert all(r[9] == "0.0 %" for r in rows_of)


def test_sitting_script_refuses_bad_input_in_one_line(tmp_path):
    """The sitting script checks its arguments before it starts any process: a wrong count, an
    unknown workload, rounds that are not a positive integer and a sitting that already holds
    the workload each get one line naming the argument, exit 2, and nothing written."""
    import subprocess

    script = ROOT / "scripts" / "torch_schedules_sitting.sh"
    profile = "vgg16-mini-b16-l16"
    cases = [([], "usage"), (["s", "no-such-workload", "3"], "WORKLOAD"),
             (["s", profile, "0"], "ROUNDS"), (["s", profile, "2x"], "ROUNDS"),
             (["2026-12-05", profile, "3"], "SITTING"), (["s", profile, "3", "--probe"], "usage"),
             (["s", profile, "3", "--probes", "x"], "usage")]
    for args, word in cases:
        r = subprocess.run(["bash", str(script), *args], capture_output=True, text=True,
                           timeout=60)
        assert r.returncode == 2, (args, r.stderr)
        assert word in r.stderr and len(r.stderr.strip().splitlines()) == 1, (args, r.stderr)
    assert not (ROOT / "results/real/torch-schedules/s").exists()


def test_compare_gives_the_ratio_of_two_calibrations(tmp_path, capsys):
    """A calibration against itself with every cost of one kind doubled: that kind reads 2.00
    whole and at every percentile, the others 1.00; different layer counts are one line, exit 2."""
    rc = _script("runtime_calibration")
    d = get_problem("sim-s8-b16-s1").to_dict()
    d["provenance"] = {**(d.get("provenance") or {}),
                       "runtime_calibration": {"calibrated_sizes": list(d["sizes"])[:2]}}
    a, b, c = tmp_path / "a.json", tmp_path / "b.json", tmp_path / "c.json"
    a.write_text(json.dumps(d))
    for st in d["stages"]:
        st["fwd"] = [2 * x for x in st["fwd"]]
    b.write_text(json.dumps(d))
    assert rc.main(["compare", str(a), str(b)]) == 0
    rows = {line.split()[0]: line.split(None, 1)[1]
            for line in capsys.readouterr().out.splitlines()[1:]}
    assert rows["fwd"] == "2.00; 2.00 / 2.00 / 2.00"
    assert rows["bwd"] == "1.00; 1.00 / 1.00 / 1.00"
    d["stages"], d["links"] = d["stages"][:-1], d["links"][:-1]
    c.write_text(json.dumps(d))
    assert rc.main(["compare", str(a), str(c)]) == 2
    assert "layers" in capsys.readouterr().err


# ------------------------------------------------------------------ schedule probes
def test_entries_probes_option_appends_the_probes(capsys):
    rc = _script("runtime_calibration")
    prof = ROOT / "results/real/torch-schedules/vgg16-mini-b16-l16.json"
    got = []
    for extra in ([], ["--probes"]):
        assert rc.main(["entries", str(prof), *extra]) == 0
        got.append(json.loads(capsys.readouterr().out)["entries"])
    P = get_problem(str(prof))
    assert got[1] == got[0] + schedule_probes(P.S, P.B) and got[0] == design(P.S, P.B)


def test_schedule_probes_are_every_other_schedule_balanced_where_torch_accepts_it():
    """Fixed by L and B alone: each probe is a shape torch accepts on two ranks, on the
    balanced partition of its chunks, once per schedule, v and M."""
    from umpipe_bench.layout import balanced_counts
    from umpipe_bench.torch_schedules import TORCH_SCHEDULES
    from umpipe_bench.torch_schedules.orders import check

    for L, B in ((14, 16), (16, 16), (6, 2)):
        ps = schedule_probes(L, B)
        for e in ps:
            assert check(e["schedule"], 2, e["M"], e["v"]) == e["v"]
            assert e["partition"] == list(balanced_counts(L, 2 * e["v"]))
            assert e["torch_class"] == TORCH_SCHEDULES[e["schedule"]].torch_class
            assert B % e["M"] == 0
        got = {(e["schedule"], e["v"], e["M"]) for e in ps}
        assert len(got) == len(ps)
        if B == 16:
            assert {s for s, _, _ in got} == set(TORCH_SCHEDULES) - {"gpipe"}
            assert ("zb1p", 1, 2) in got and ("zb1p", 2, 4) in got
            assert ("dualpipev", 2, 4) in got and ("dualpipev", 2, 2) not in got  # M >= 2D
        else:
            assert {M for _, _, M in got} == {2} and "dualpipev" not in {s for s, _, _ in got}


def test_schedule_class_bias_refuses_a_missing_sitting_in_one_line(tmp_path, capsys):
    scb = _script("schedule_class_bias")
    assert scb.main([str(tmp_path / "nope")]) == 2
    err = capsys.readouterr().err.strip()
    assert "SITTING_DIR" in err and "\n" not in err


def test_pooled_ranks_each_schedules_median_over_the_sittings():
    from umpipe_bench.runtime.stats import spearman

    scb = _script("schedule_class_bias")
    T = np.array([1.0, 1.1, 1.2, 1.3])
    order = ["a", "b", "c", "d"]
    data = {"s1": (order, T, 2.0 * np.array([1.0, 1.1, 1.2, 1.3]), None),
            "s2": (order, 1.5 * T, 3.0 * np.array([1.1, 1.0, 1.2, 1.3]), None),  # a, b swapped
            "s3": (order, T, np.array([1.0, 1.1, 1.3, 1.2]), None)}  # c, d swapped
    assert [spearman(list(t), list(m)) for _, t, m, _ in data.values()] == \
        pytest.approx([1.0, 0.8, 0.8])
    names, p, m = scb.pooled(data)
    assert names == order
    centre = (np.log(1.1) + np.log(1.2)) / 2  # every sitting's median pick, scale taken out
    np.testing.assert_allclose(p, np.log(T) - centre, atol=1e-12)
    np.testing.assert_allclose(m, np.log([1.0, 1.1, 1.2, 1.3]) - centre, atol=1e-12)
    # a schedule's pick may be missing from a sitting: its median is over the others
    names, p, m = scb.pooled({**data, "s4": (["a", "b"], T[:2], T[:2], None)})
    assert names == order and m[3] == pytest.approx(np.log(1.3) - centre)

    boot = scb.pooled_bootstrap(data, n=40, seed=1)
    assert np.array_equal(boot, scb.pooled_bootstrap(data, n=40, seed=1))
    pick = np.random.default_rng(1).integers(0, 3, 3)
    keys = list(data)
    _, p0, m0 = scb.pooled({j: data[keys[k]] for j, k in enumerate(pick)})
    assert boot[0] == pytest.approx(spearman(list(p0), list(m0)))
    same = scb.pooled_bootstrap({k: data["s2"] for k in ("x", "y", "z")}, n=10)
    assert same == pytest.approx([0.8] * 10)
