"""torch.distributed.pipelining's seven schedules run by the runtime (docs/MODEL.md §5): after one
iteration in float64 every parameter gradient equals the single-process full-batch gradient;
what torch would refuse is refused before launch; no process outlives a run or its command.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from umpipe_bench.layout import chunk_devices, device_chunks
from umpipe_bench.runtime import torch_entries, torch_report
from umpipe_bench.runtime.errors import PlanRefused
from umpipe_bench.runtime.torch_schedules import TorchMultiSpec, make_entry
from umpipe_bench.torch_schedules import TORCH_SCHEDULES

CLASSES = {info.torch_class for info in TORCH_SCHEDULES.values()}

ROOT = Path(__file__).resolve().parents[1]
B, LAYERS = 8, 8
# one entry per torch schedule class; unequal partitions so chunk boundaries matter
ENTRIES = [
    {"schedule": "gpipe", "torch_class": "ScheduleGPipe", "M": 4, "partition": [5, 3]},
    {"schedule": "1f1b", "torch_class": "Schedule1F1B", "M": 8, "partition": [3, 5]},
    {"schedule": "interleaved-1f1b", "torch_class": "ScheduleInterleaved1F1B", "M": 4,
     "partition": [2, 3, 1, 2], "v": 2},
    {"schedule": "looped-bfs", "torch_class": "ScheduleLoopedBFS", "M": 2,
     "partition": [1, 2, 3, 2], "v": 2},
    {"schedule": "zb1p", "torch_class": "ScheduleInterleavedZeroBubble", "M": 4,
     "partition": [2, 2, 2, 2], "v": 2},
    {"schedule": "zbv", "torch_class": "ScheduleZBVZeroBubble", "M": 4,
     "partition": [3, 2, 2, 1], "v": 2},
    {"schedule": "dualpipev", "torch_class": "ScheduleDualPipeV", "M": 8,
     "partition": [1, 2, 2, 3], "v": 2},
]


def _spec(tmp_path: Path, **settings) -> TorchMultiSpec:
    entries = [make_entry(e, D=2, B=B, n_layers=LAYERS, index=i) for i, e in enumerate(ENTRIES)]
    settings.setdefault("dtype", "float64")
    settings.setdefault("rounds", 1)
    settings.setdefault("warmup", 0)
    settings.setdefault("optimizer", "none")
    settings.setdefault("timeout_s", 60.0)
    return TorchMultiSpec(run_id=uuid.uuid4().hex, model="tiny-mlp", config={"layers": LAYERS},
                          B=B, D=2, entries=entries, out_dir=str(tmp_path), **settings)


def test_layouts() -> None:
    assert chunk_devices("one", 2, 1) == (0, 1)
    assert chunk_devices("loop", 2, 2) == (0, 1, 0, 1)
    assert chunk_devices("v", 2, 2) == (0, 1, 1, 0)
    assert chunk_devices("v", 3, 2) == (0, 1, 2, 2, 1, 0)
    assert device_chunks("loop", 3, 3)[1] == (1, 4, 7)
    assert device_chunks("v", 4, 2)[1] == (1, 6)
    assert CLASSES == {e["torch_class"] for e in ENTRIES}
    for e in ENTRIES:  # the schedule is resolved through the one registry, by class or name
        by_class = make_entry(e, D=2, B=B, n_layers=LAYERS)
        by_name = make_entry({k: x for k, x in e.items() if k != "torch_class"},
                             D=2, B=B, n_layers=LAYERS)
        assert by_class.kind is by_name.kind is TORCH_SCHEDULES[e["schedule"]]
        assert by_name.torch_class == e["torch_class"]


@pytest.mark.parametrize(
    ("item", "match"),
    [
        ({"torch_class": "ScheduleGPipe", "M": 3, "partition": [4, 4]}, "does not divide B"),
        ({"torch_class": "ScheduleGPipe", "M": 2, "partition": [4, 3]}, "covers 7 layers"),
        ({"torch_class": "ScheduleGPipe", "M": 2, "partition": [2, 2, 2, 2]}, "one chunk"),
        ({"torch_class": "Schedule1F1B", "M": 1, "partition": [4, 4]}, "M >= D = 2"),
        ({"torch_class": "ScheduleZBVZeroBubble", "M": 2, "partition": [4, 4]}, "exactly 2"),
        ({"torch_class": "ScheduleDualPipeV", "M": 2, "partition": [2, 2, 2, 2]}, "M >= 2D = 4"),
        ({"torch_class": "ScheduleInterleaved1F1B", "M": 2, "partition": [1, 2, 2, 2, 1]},
         "5 chunks"),
        ({"torch_class": "ScheduleZBVZeroBubble", "M": 2, "partition": [2, 2, 2, 2], "v": 3},
         "'v' is 3"),
        ({"schedule": "nope", "M": 2, "partition": [4, 4]}, "no 'torch_class'"),
        ({"torch_class": "ScheduleX", "M": 2, "partition": [4, 4]}, "'torch_class' must be"),
    ],
)
def test_entries_torch_would_refuse_are_refused_before_launch(item, match) -> None:
    with pytest.raises(PlanRefused, match=match):
        make_entry(item, D=2, B=B, n_layers=LAYERS)


def test_interleaved_rounds_rule_is_torchs() -> None:
    """M = 6 on D = 4 gives 1 round (accepted); M = 10 on D = 4 gives 2 rounds (accepted);
    M = 5 on D = 2 gives 2 rounds and 5 % 2 != 0 (refused, as torch's constructor does)."""
    for M, D in ((6, 4), (10, 4)):
        make_entry({"torch_class": "ScheduleInterleaved1F1B", "M": M,
                    "partition": [1] * (2 * D)}, D=D, B=60, n_layers=2 * D)
    with pytest.raises(PlanRefused, match="rounds"):
        make_entry({"torch_class": "ScheduleInterleavedZeroBubble", "M": 5,
                    "partition": [1, 1, 1, 1]}, D=2, B=10, n_layers=4)


@pytest.mark.runtime
def test_every_torch_schedule_gives_the_full_batch_gradient(tmp_path: Path,
                                                            monkeypatch) -> None:
    torch = pytest.importorskip("torch")
    from umpipe_bench.runtime.allocator import ENV, STEADY
    from umpipe_bench.runtime.launcher import launch, run_processes
    from umpipe_bench.runtime.reference import reference_gradients

    for key in (*STEADY, ENV):
        monkeypatch.delenv(key, raising=False)
    spec = _spec(tmp_path, dump_grads=True)
    result = launch(spec, tmp_path, deadline_s=150, stage_args=["--torch-multi"])
    assert run_processes(spec.run_id) == []
    # the stage processes started with the steady allocator settings, and say so
    assert result["malloc"] == "steady" and result["malloc_env"] == STEADY
    ref_loss, per_layer = reference_gradients("tiny-mlp", {"layers": LAYERS}, [1] * LAYERS, B)
    ref = {f"{i}.{name[2:]}": g for i, d in enumerate(per_layer) for name, g in d.items()}
    for k, entry in enumerate(spec.entries):
        got: dict = {}
        for r in range(2):
            data = torch.load(tmp_path / f"grads-e{k}-r{r}.pt", weights_only=True)
            assert not set(got) & set(data["grads"]), "a layer held by both ranks"
            got.update(data["grads"])
        assert set(got) == set(ref), entry.label
        for name, g in ref.items():
            assert got[name] is not None, f"{entry.label}: no gradient for {name}"
            assert torch.allclose(got[name], g, rtol=1e-10, atol=1e-13), (
                f"{entry.label}: gradient of {name} differs by "
                f"{(got[name] - g).abs().max().item():.3g}")
        row = result["entries"][k]
        assert row["torch_class"] == entry.torch_class and len(row["times"]) == 1
        assert row["loss"][0] == pytest.approx(ref_loss, rel=1e-12), entry.label


@pytest.mark.runtime
def test_failing_rank_is_named_and_nothing_survives(tmp_path: Path) -> None:
    pytest.importorskip("torch")
    from umpipe_bench.runtime.errors import StageFailure
    from umpipe_bench.runtime.launcher import launch, run_processes

    spec = _spec(tmp_path)
    spec.entries = spec.entries[:2]
    with pytest.raises(StageFailure) as info:
        launch(spec, tmp_path, deadline_s=120, stage_args=["--torch-multi"],
               extra_env={"UMPIPE_FAULT": "raise:1"})
    assert info.value.stage == 1 and "injected fault at rank 1" in str(info.value)
    assert run_processes(spec.run_id) == []


@pytest.mark.runtime
@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGKILL])
def test_measure_script_processes_die_with_it(tmp_path: Path, sig: int) -> None:
    """scripts/measure_torch_schedules.py killed while its ranks run leaves no process."""
    pytest.importorskip("torch")
    from tests.test_orphans import _env, _kill_and_check

    plan = tmp_path / "entries.json"
    plan.write_text(json.dumps({"workload": {"model": "tiny-mlp", "config": {"layers": LAYERS},
                                             "B": B}, "entries": ENTRIES[:2]}))
    proc = subprocess.Popen(
        [sys.executable, str(ROOT / "scripts" / "measure_torch_schedules.py"), str(plan),
         "--rounds", "1", "--warmup", "0", "--out", str(tmp_path / "out.json"),
         "--report", str(tmp_path / "r.md"), "--timeout", "600"],
        cwd=tmp_path, env=_env(UMPIPE_FAULT="hang:1"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    _kill_and_check(proc, sig, want=3, settle=2.0)


def test_example_entries_and_profile_commands_fit_their_workloads() -> None:
    from umpipe_bench.cli import build_parser
    from umpipe_bench.runtime.torch_schedules import WORKLOADS

    for name, w in WORKLOADS.items():
        data = torch_entries.example_entries(name)
        entries = [make_entry(e, D=2, B=w["B"], n_layers=w["layers"], index=i)
                   for i, e in enumerate(data["entries"])]
        assert {e.torch_class for e in entries} == CLASSES
        args = build_parser().parse_args(torch_entries.profile_command(name).split()[1:])
        assert args.model == w["model"] and args.batch == w["B"]
        assert dict(args.config) == w["config"]
        assert args.layers_per_stage is None and args.stages is None  # one layer per stage


def test_summary_of_a_perfect_prediction() -> None:
    times = {"a": [0.3, 0.1, 0.2], "b": [0.4, 0.5, 0.6], "c": [0.9, 0.7, 0.8]}
    result = {"entries": [{"label": k, "torch_class": "ScheduleGPipe", "M": 2,
                           "partition": [4, 4], "v": 1, "times": t, "T_pred": sorted(t)[1]}
                          for k, t in times.items()]}
    summary = torch_report.summarize(result)
    assert [r["median"] for r in summary["rows"]] == [0.2, 0.5, 0.8]
    assert summary["spearman"] == pytest.approx(1.0)
    assert summary["median_rel_error"] == pytest.approx(0.0)
    result["entries"][0]["T_pred"] = 0.3  # 50 % too high, ranks unchanged
    summary = torch_report.summarize(result)
    assert summary["rows"][0]["rel_error"] == pytest.approx(0.5)
    assert summary["spearman"] == pytest.approx(1.0)
    assert summary["median_rel_error"] == pytest.approx(0.0)
    meta = {"workload": {"name": "w", "model": "m", "config": {}, "B": 8}, "threads": 1,
            "dtype": "float32", "optimizer": "adam", "rounds": 3, "warmup": 1, "host": "h",
            "torch": "t", "date": "d", "load_before": "0", "load_after": "0",
            "peak_rss_mib": [1.0, 2.0]}
    text = torch_report.report("python scripts/measure_torch_schedules.py x.json", meta, summary)
    assert text.splitlines()[2] == "Command: `python scripts/measure_torch_schedules.py x.json`"
    assert "Spearman rank correlation of predicted vs measured medians over 3 entries: 1.000" \
        in text


def test_workload_from_a_profiled_problem() -> None:
    w = torch_entries.resolve_workload("gpt1-mini-s2")
    assert (w["model"], w["B"], w["config"]["blocks"]) == ("gpt1-mini", 32, 12)
    assert torch_entries.resolve_workload({"model": "tiny-mlp", "B": 8})["name"] == "tiny-mlp-b8"
    with pytest.raises(PlanRefused, match="unknown workload"):
        torch_entries.resolve_workload("no-such-workload")


def test_calibration_recovers_a_known_overhead_and_combine_reports_it(tmp_path) -> None:
    """A run whose 'measured' medians are the simulator's T with 2 ms per action: the fit finds
    2 ms, and the combined page gives that model rank correlation 1 and zero error."""
    problem = "sim-s8-b16-s1"
    c = 0.002
    cal = torch_entries.calibration_entries(problem)["entries"]
    assert [e["M"] for e in cal] == [1, 2, 4, 8, 16] and all(e["v"] == 1 for e in cal)
    picks = torch_entries.predicted_entries(problem, "stash", 0.0)["entries"]

    def run(entries, name):
        rows = [{"label": f"{e['schedule']}:M{e['M']}:{'-'.join(map(str, e['partition']))}",
                 "torch_class": e["torch_class"], "M": e["M"], "partition": e["partition"],
                 "v": e["v"], "T_pred": None} for e in entries]
        for r, T in zip(rows, torch_entries.predict_rows(problem, rows, c)):
            r.update(median=T, low=T, high=T, n=1)
        path = tmp_path / name
        path.write_text(__import__("json").dumps({
            "command": "x", "date": "d", "load_before": "0", "load_after": "0",
            "workload": {"name": problem}, "summary": {"rows": rows}}))
        return path

    cal_path = run(cal, "w.calrun.json")
    assert torch_entries.fit_overhead(problem, str(cal_path)) == pytest.approx(c, abs=1e-6)
    run_path = run(picks, "w.run.json")
    report = tmp_path / "page.md"
    assert torch_report.combine([str(run_path)], str(report), None, "cmd") == 0
    line = next(x for x in report.read_text().splitlines() if "| with overhead |" in x)
    cells = [x.strip() for x in line.split("|")]
    assert cells[3] == "2.00 ms" and cells[4] == "off" and cells[5].startswith("1.000") \
        and cells[9] == "0.0 %"
    # a second launch of the same entries, 10 % slower throughout, leaves the ranks alone
    # and the per-entry median over launches is the middle of the two
    import json

    data = json.loads(run_path.read_text())
    for r in data["summary"]["rows"]:
        r["median"] *= 1.1
    second = tmp_path / "w.run2.json"
    second.write_text(json.dumps(data))
    assert torch_report.combine([str(run_path), str(second)], str(report), None, "cmd") == 0
    line = next(x for x in report.read_text().splitlines() if "| with overhead |" in x)
    cells = [x.strip() for x in line.split("|")]
    assert cells[5].startswith("1.000") and cells[7] == cells[8] == "1.00, 1.00" \
        and cells[9] == "4.8 %"  # 0.05 / 1.05
    # the measurement's own agreement: the two launches rank the entries alike
    assert "Launch against launch (Spearman over all entries): 1-2 1.00" in report.read_text()


def test_spec_names_are_checked_as_every_runtime_spec_checks_them(tmp_path: Path) -> None:
    """Case and a ``torch.`` prefix are accepted as in the stage and chunk specs (one check,
    runtime.spec.check_run_names); an unknown name is refused before any process starts."""
    spec = _spec(tmp_path, optimizer="ADAM", dtype="torch.float64")
    assert spec.optimizer == "ADAM"
    with pytest.raises(PlanRefused, match="optimizer 'lion': expected one of"):
        _spec(tmp_path, optimizer="lion")


def _layer_problem(path: Path):
    """A per-layer tiny-mlp problem (one layer per stage, ``LAYERS`` stages, ``B``)."""
    from umpipe_bench.problem import Link, Problem, StageCosts

    sizes = tuple(range(1, B + 1))
    prob = Problem(
        name="tiny-mlp-l8", B=B, sizes=sizes,
        stages=tuple(StageCosts(fwd=tuple(1e-4 * (1 + s) * m for m in sizes),
                                bwd=tuple(2e-4 * (1 + s) * m for m in sizes),
                                rbwd=tuple(3e-4 * (1 + s) * m for m in sizes), opt=1e-5)
                     for s in range(LAYERS)),
        links=(Link(act_bytes=128.0, grad_bytes=128.0, latency=1e-4, bandwidth=1e9),)
        * (LAYERS - 1),
        provenance={"model": "tiny-mlp", "config": {"layers": LAYERS},
                    "layers_per_stage": [[i] for i in range(LAYERS)], "dtype": "float64",
                    "source": "test", "device": "cpu"},
    ).validate()
    prob.save(path)
    return prob


def _chunk_plan_files(tmp_path: Path) -> list[Path]:
    """Two unequal chunk plans for D = 2 on ``LAYERS`` layers: a V plan (stash) and a loop
    plan (recompute), saved as plan files."""
    from umpipe_bench.chunkplan import ChunkPlan

    plans = [
        ChunkPlan(D=2, layout="v", layers=(3, 1, 2, 2), fwd=((3, 5), (1, 2, 5), (4, 4), (8,)),
                  bwd=((3, 5), (1, 2, 5), (4, 4), (8,)), mode="stash", split=False),
        ChunkPlan(D=2, layout="loop", layers=(2, 2, 1, 3), fwd=((2, 6), (8,), (5, 3), (1, 7)),
                  bwd=((8,), (4, 4), (2, 6), (3, 5)), mode="recompute", split=False,
                  caps=(4, 8)),
    ]
    out = []
    for k, plan in enumerate(plans):
        path = tmp_path / f"plan{k}.json"
        plan.save(path)
        out.append(path)
    return out


def test_chunk_plan_entries_carry_the_device_simulators_T(tmp_path: Path) -> None:
    from umpipe_bench.chunk_torch import simulate_plan
    from umpipe_bench.chunkplan import ChunkPlan

    prob = _layer_problem(tmp_path / "p.json")
    files = _chunk_plan_files(tmp_path)
    got = torch_entries.chunk_entries(str(tmp_path / "p.json"),
                                      [{"chunk_plan": str(files[0]), "label": "mine"},
                                       {"chunk_plan": str(files[1])}])
    assert [e.label for e in got] == ["mine", "chunk:plan1"]
    for e, f in zip(got, files):
        plan = ChunkPlan.load(f)
        assert e.T_pred == simulate_plan(prob, plan).iteration_time
        assert [len(g) for g in e.layers] == list(plan.layers) and e.D == 2
    spec = TorchMultiSpec(run_id="x", model="tiny-mlp", config={"layers": LAYERS}, B=B, D=2,
                          entries=[make_entry(ENTRIES[0], D=2, B=B, n_layers=LAYERS)],
                          chunks=got)
    spec.save(tmp_path / "spec.json")
    assert TorchMultiSpec.load(tmp_path / "spec.json") == spec
    with pytest.raises(PlanRefused, match="share the label"):
        TorchMultiSpec(run_id="x", model="tiny-mlp", config={}, B=B, D=2, entries=[],
                       chunks=[got[0], got[0]])
    with pytest.raises(PlanRefused, match="sum to B = 4"):
        TorchMultiSpec(run_id="x", model="tiny-mlp", config={}, B=4, D=2, entries=[],
                       chunks=got[:1])
    with pytest.raises(PlanRefused, match="chunk entry 0: .*does not exist"):
        torch_entries.chunk_entries(str(tmp_path / "p.json"), [{"chunk_plan": "nope.json"}])
    with pytest.raises(PlanRefused, match="profiled problem"):
        torch_entries.chunk_entries({"model": "tiny-mlp", "B": B},
                                    [{"chunk_plan": str(files[0])}])


@pytest.mark.runtime
def test_chunk_plans_and_torch_schedules_in_one_launch_give_the_full_batch_gradient(
        tmp_path: Path) -> None:
    """scripts/measure_torch_schedules.py --check-grads on torch entries and chunk plans run by
    our runtime in the same launch: every entry's gradients are the full-batch ones; a timed
    launch reports the chunk plans with their T_pred beside torch's entries."""
    pytest.importorskip("torch")
    _layer_problem(tmp_path / "p.json")
    files = _chunk_plan_files(tmp_path)
    entries = tmp_path / "entries.json"
    entries.write_text(json.dumps({"workload": str(tmp_path / "p.json"), "entries": [
        ENTRIES[1], {"chunk_plan": str(files[0])}, ENTRIES[5], {"chunk_plan": str(files[1])}]}))
    script = [sys.executable, str(ROOT / "scripts" / "measure_torch_schedules.py"), str(entries)]
    done = subprocess.run([*script, "--check-grads", "--timeout", "60"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    assert "4 of 4 entries give the full-batch gradient" in done.stdout
    assert done.stdout.count(" ok ") == 4
    done = subprocess.run([*script, "--rounds", "2", "--warmup", "0", "--timeout", "60",
                           "--out", "out.json", "--report", "r.md"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=300)
    assert done.returncode == 0, done.stdout + done.stderr
    rows = {r["label"]: r for r in
            json.loads((tmp_path / "out.json").read_text())["summary"]["rows"]}
    assert set(rows) >= {"chunk:plan0", "chunk:plan1"} and len(rows) == 4
    assert rows["chunk:plan0"]["torch_class"] is None
    assert rows["chunk:plan0"]["partition"] == [3, 1, 2, 2]
    assert rows["chunk:plan1"]["T_pred"] > 0
    assert "chunk plan, our runtime" in (tmp_path / "r.md").read_text()


def test_gain_page_names_the_fastest_torch_schedule_as_measured(tmp_path: Path) -> None:
    """Three launches where the plan runs 0.8 of one torch entry and 0.5 of the other in every
    round: the faster torch entry as measured is named and the speedups are 1.25 and 2.0 with
    degenerate intervals; launches of other entries are refused."""
    paths = []
    for k in range(3):
        base = [0.10 + 0.01 * i + 0.003 * k for i in range(5)]
        entries = [
            {"label": "slow", "torch_class": "ScheduleGPipe", "T_pred": 0.2,
             "times": [2 * t / 0.8 * 0.8 for t in base]},
            {"label": "fast", "torch_class": "Schedule1F1B", "T_pred": 0.15,
             "times": [t / 0.8 for t in base]},
            {"label": "plan", "torch_class": None, "T_pred": 0.1, "times": base,
             "rank_times": [[0.05] * 5, base]},
        ]
        run = {"command": f"launch {k}", "date": "d", "load_before": "1", "load_after": "1",
               "workload": {"name": "w", "model": "m", "config": {}, "B": 8}, "threads": 1,
               "dtype": "float32", "optimizer": "adam", "torch": "t",
               "result": {"rounds": 5, "warmup": 1, "entries": entries}}
        paths.append(tmp_path / f"r{k}.json")
        paths[-1].write_text(json.dumps(run))
    out = tmp_path / "gain.md"
    assert torch_report.gain([str(p) for p in paths], str(out), "cmd") == 0
    text = out.read_text()
    assert "The fastest torch schedule as measured: **fast**." in text
    assert "| plan | **fast** | **1.250** | [1.250, 1.250] | 1.250, 1.250, 1.250 | 1.500 |" \
        in text
    assert "| plan | slow | 2.000 | [2.000, 2.000] | 2.000, 2.000, 2.000 | 2.000 |" in text
    # pooled over the launches: the 8th of 15 rounds; per rank, each rank's own median
    row = next(x for x in text.splitlines() if x.startswith("| plan | our runtime |"))
    assert row.split(" | ")[3] == "123.0" and row.split(" | ")[6] == "50.0, 123.0"
    run = json.loads(paths[2].read_text())
    run["result"]["entries"] = run["result"]["entries"][1:]
    paths[2].write_text(json.dumps(run))
    with pytest.raises(PlanRefused, match="not a launch of the entries"):
        torch_report.gain([str(p) for p in paths], str(out), "cmd")
