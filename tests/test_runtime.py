"""Runtime tests (docs/MODEL.md §5): gradients equal the single-process full-batch gradient for any
plan, schedule and mode; faults end the run naming the stage with no process left behind; shape
mismatches are clear errors; plans that do not fit are refused before launch.

Each launching test starts ``torchrun`` with gloo on localhost (a few seconds of start-up), so
plans are batched into one launch per stage count.
"""

from __future__ import annotations

import json
import random
import time
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from umpipe_bench.plan import Plan  # noqa: E402
from umpipe_bench.problem import Link, Problem, StageCosts  # noqa: E402
from umpipe_bench.runtime.errors import PlanRefused, StageFailure  # noqa: E402
from umpipe_bench.runtime.job import PlannedRun, make_spec, spec_for_problem  # noqa: E402
from umpipe_bench.runtime.launcher import _diagnose, launch, run_processes  # noqa: E402
from umpipe_bench.runtime.reference import (  # noqa: E402
    compare_gradients,
    load_stage_gradients,
    reference_gradients,
)
from umpipe_bench.schedules import build_schedule  # noqa: E402

pytestmark = pytest.mark.runtime

# S -> (B, tiny-mlp layers, layers_per_stage in either accepted form)
LAYOUTS = {
    2: (8, 6, [3, 3]),
    3: (9, 6, [[0, 1], [2, 3], [4, 5]]),
    4: (7, 7, [2, 1, 2, 2]),
}


def random_composition(rng: random.Random, B: int) -> tuple[int, ...]:
    bits = [int(rng.random() < 0.4) for _ in range(B - 1)]
    sizes, last = [], 0
    for i, b in enumerate(bits):
        if b:
            sizes.append(i + 1 - last)
            last = i + 1
    sizes.append(B - last)
    return tuple(sizes)


def random_plan(rng: random.Random, S: int, B: int, mode: str) -> Plan:
    fwd = tuple(random_composition(rng, B) for _ in range(S))
    bwd = fwd if mode == "stash" else tuple(random_composition(rng, B) for _ in range(S))
    return Plan(fwd=fwd, bwd=bwd, mode=mode)


def plans_for(S: int, B: int, seed: int) -> list[PlannedRun]:
    rng = random.Random(seed)
    runs = [
        PlannedRun("rand-stash-gpipe", random_plan(rng, S, B, "stash"), "gpipe"),
        PlannedRun("rand-recompute-gpipe-1", random_plan(rng, S, B, "recompute"), "gpipe"),
        PlannedRun("rand-recompute-gpipe-2", random_plan(rng, S, B, "recompute"), "gpipe"),
        PlannedRun("edp3-stash-1f1b", Plan.edp(S, B, 3, "stash"), "1f1b"),
        PlannedRun("edp2-recompute-1f1b", Plan.edp(S, B, 2, "recompute"), "1f1b"),
        PlannedRun("edpB-stash-1f1b", Plan.edp(S, B, B, "stash"), "1f1b"),
        PlannedRun("edp1-recompute-gpipe", Plan.edp(S, B, 1, "recompute"), "gpipe"),
    ]
    # unequal plans with random in-flight caps (docs/SCHEDULES.md): the capped schedule
    for mode in ("stash", "recompute"):
        plan = random_plan(rng, S, B, mode).with_caps([rng.randint(1, B // 2) for _ in range(S)])
        runs.append(PlannedRun(f"rand-{mode}-capped", plan, "capped"))
    # the random plans must really be unequal somewhere, and the caps must change the order
    assert any(len(set(p)) > 1 for p in runs[1].plan.fwd + runs[1].plan.bwd)
    for run in runs[-2:]:
        uncapped = run.plan.with_caps(None)
        assert build_schedule("capped", run.plan) != build_schedule("gpipe", uncapped)
    return runs


def tiny_spec(S: int, runs: list[PlannedRun], **settings):
    B, layers, lps = LAYOUTS[S]
    settings.setdefault("dtype", "float64")
    settings.setdefault("iters", 1)
    settings.setdefault("warmup", 0)
    settings.setdefault("optimizer", "none")
    settings.setdefault("timeout_s", 60.0)
    settings.setdefault("peer", False)
    return make_spec("tiny-mlp", {"layers": layers}, lps, B, runs, **settings)


@pytest.mark.parametrize("S", [2, 3, 4])
def test_gradients_equal_full_batch_gradient(S: int, tmp_path: Path) -> None:
    B, layers, lps = LAYOUTS[S]
    runs = plans_for(S, B, seed=100 + S)
    # S = 3 receives inline (no prefetch thread): both receive paths are checked
    spec = tiny_spec(S, runs, dump_grads=True, peer=(S == 2), prefetch=(S != 3))
    result = launch(spec, tmp_path, deadline_s=150)
    ref_loss, ref_grads = reference_gradients("tiny-mlp", {"layers": layers}, lps, B)
    assert [e.label for e in spec.entries][: len(runs)] == [r.label for r in runs]
    if S == 2:  # the peer engine runs the EDP stash plans too, with the same gradients
        assert [e.label for e in spec.entries[len(runs) :]] == ["torch:1f1b:8"]
    for k, entry in enumerate(spec.entries):
        loss, grads = load_stage_gradients(tmp_path, k, S)
        bad = compare_gradients(ref_grads, grads, rtol=1e-10, atol=1e-13)
        assert not bad, f"{entry.label}: {bad}"
        assert loss == pytest.approx(ref_loss, rel=1e-12), entry.label
        assert result["entries"][k]["loss"][0] == pytest.approx(ref_loss, rel=1e-12)
    assert run_processes(spec.run_id) == []


def _fault_run(tmp_path: Path, S: int, fault: str, **settings) -> tuple[StageFailure, float]:
    B = LAYOUTS[S][0]
    runs = [
        PlannedRun("a", Plan.edp(S, B, 4, "stash"), "gpipe"),
        PlannedRun("b", Plan.edp(S, B, 2, "recompute"), "gpipe"),
    ]
    spec = tiny_spec(S, runs, iters=2, **settings)
    t0 = time.monotonic()
    with pytest.raises(StageFailure) as info:
        launch(spec, tmp_path, deadline_s=120, extra_env={"UMPIPE_FAULT": fault})
    elapsed = time.monotonic() - t0
    assert run_processes(spec.run_id) == [], "processes of the failed run survived"
    return info.value, elapsed


def test_stage_that_raises_is_named_and_nothing_survives(tmp_path: Path) -> None:
    err, elapsed = _fault_run(tmp_path, 3, "raise:1:2")
    assert err.stage == 1
    assert "stage 1 failed" in str(err) and "injected fault" in str(err)
    assert elapsed < 60


def test_stage_that_dies_is_named_and_nothing_survives(tmp_path: Path) -> None:
    err, elapsed = _fault_run(tmp_path, 2, "exit:1:3")
    assert err.stage == 1
    assert "died" in str(err)
    assert elapsed < 60


def test_stage_that_hangs_ends_the_run_within_the_timeout(tmp_path: Path) -> None:
    err, elapsed = _fault_run(tmp_path, 2, "hang:0:1", timeout_s=4.0)
    assert err.stage == 0
    assert "stage 0" in str(err)
    assert elapsed < 60


def test_wrong_shape_is_refused_by_the_sender(tmp_path: Path) -> None:
    # stage 0's activation for microbatch 1 carries an extra sample: never put on the wire
    err, _ = _fault_run(tmp_path, 2, "shape:0:1")
    msg = str(err)
    assert err.stage == 0
    assert "ShapeMismatchError" in msg
    assert "refusing to send activation microbatch 1 (samples [2, 4)) for stage 1" in msg
    assert "expected (2, 16) float64, got (3, 16) float64" in msg


def test_header_mismatch_is_a_clear_error_at_the_receiver(tmp_path: Path) -> None:
    # stage 1's gradient header names the wrong microbatch: stage 0 refuses it before use
    err, _ = _fault_run(tmp_path, 2, "header:1:5")
    msg = str(err)
    assert err.stage == 0
    assert "gradient microbatch 1 (samples [2, 4)) from stage 1" in msg
    assert "got gradient microbatch 2" in msg


def test_plans_that_do_not_fit_are_refused_before_launch() -> None:
    B = LAYOUTS[2][0]
    with pytest.raises(PlanRefused, match="3 stages but .* S = 2"):
        tiny_spec(2, [PlannedRun("x", Plan.edp(3, B, 2), "gpipe")])
    with pytest.raises(PlanRefused, match="B = 6 samples but .* B = 8"):
        tiny_spec(2, [PlannedRun("x", Plan.edp(2, 6, 2), "gpipe")])
    uneq = Plan(fwd=((3, 5), (4, 4)), bwd=((3, 5), (4, 4)))
    with pytest.raises(PlanRefused, match="1f1b"):
        tiny_spec(2, [PlannedRun("x", uneq, "1f1b")])
    with pytest.raises(PlanRefused, match="contiguous"):
        make_spec("tiny-mlp", {}, [[0, 2], [1, 3, 4, 5]], B, [])


def tiny_problem(path: Path, S: int = 2) -> Problem:
    B, layers, lps = LAYOUTS[S]
    sizes = (1, 2, 4, B)
    prob = Problem(
        name=f"tiny-mlp-s{S}",
        B=B,
        sizes=sizes,
        stages=tuple(
            StageCosts(
                fwd=tuple(1e-4 * m for m in sizes),
                bwd=tuple(2e-4 * m for m in sizes),
                rbwd=tuple(3e-4 * m for m in sizes),
                opt=1e-5,
            )
            for _ in range(S)
        ),
        links=(Link(act_bytes=128.0, grad_bytes=128.0, latency=1e-4, bandwidth=1e9),) * (S - 1),
        provenance={
            "model": "tiny-mlp",
            "config": {"layers": layers},
            "layers_per_stage": lps,
            "dtype": "float64",
            "source": "test",
            "device": "cpu",
        },
    ).validate()
    prob.save(path)
    return prob


def test_problem_without_model_is_refused(tmp_path: Path) -> None:
    prob = tiny_problem(tmp_path / "p.json")
    bare = Problem(
        name="bare",
        B=prob.B,
        sizes=prob.sizes,
        stages=prob.stages,
        links=prob.links,
        provenance={"source": "synthetic"},
    )
    with pytest.raises(PlanRefused, match="layers_per_stage"):
        spec_for_problem(bare, [PlannedRun("g", Plan.edp(2, prob.B, 2), "gpipe")])


def test_cli_execute_end_to_end(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from umpipe_bench.cli import main
    from umpipe_bench.runtime.report import COLUMNS

    ppath = tmp_path / "tiny.json"
    prob = tiny_problem(ppath)
    uneq = Plan(fwd=((3, 5), (1, 3, 4)), bwd=((2, 6), (5, 3)), mode="recompute")
    uneq.save(tmp_path / "uneq.json")
    csv_path = tmp_path / "rows.csv"
    rc = main(
        [
            "execute",
            "--problem",
            str(ppath),
            "--plan",
            "gpipe:2",
            "--vs",
            "1f1b:4",
            "--vs",
            str(tmp_path / "uneq.json"),
            "--iters",
            "3",
            "--warmup",
            "1",
            "--run-dir",
            str(tmp_path / "run"),
            "--json",
            "--csv",
            str(csv_path),
        ]
    )
    assert rc == 0
    out = json.loads(capsys.readouterr().out)
    rows = out["rows"]
    labels = [r["plan"] for r in rows]
    assert labels == ["gpipe:2", "1f1b:4", "uneq", "torch:gpipe:2", "torch:1f1b:4"]
    assert rows[0]["speedup_measured"] == pytest.approx(1.0)
    assert rows[0]["peer"] == "torch:gpipe:2" and rows[0]["peer_ratio"] > 0
    assert rows[2]["plan_kind"] == "UEDP" and rows[2]["mode"] == "recompute"
    for r in rows:
        assert r["predicted_time"] > 0 and r["measured_median"] > 0
    header = csv_path.read_text().splitlines()[0].split(",")
    assert header == list(COLUMNS)
    assert prob.S == 2


def test_cli_refuses_plan_with_wrong_stage_count(tmp_path: Path, capsys) -> None:
    from umpipe_bench.cli import main

    ppath = tmp_path / "tiny.json"
    tiny_problem(ppath)
    Plan.edp(3, 8, 2).save(tmp_path / "three.json")
    t0 = time.monotonic()
    rc = main(["execute", "--problem", str(ppath), "--plan", str(tmp_path / "three.json")])
    assert rc == 2
    assert "3 stages" in capsys.readouterr().err
    assert time.monotonic() - t0 < 10


def test_rechunking_matches_concatenation() -> None:
    from umpipe_bench.runtime.rechunk import ChunkStream

    rng = random.Random(3)
    for _ in range(50):
        B = rng.randint(1, 20)
        prod, cons = random_composition(rng, B), random_composition(rng, B)
        data = torch.arange(B * 2).reshape(B, 2)
        starts = [sum(prod[:k]) for k in range(len(prod))]
        calls: list[int] = []

        def recv(k: int, a: int, b: int, starts=starts, data=data, calls=calls) -> torch.Tensor:
            assert a == starts[k]
            calls.append(k)
            return data[a:b]

        stream = ChunkStream(prod, recv)
        a = 0
        for m in cons:
            got = stream.take(a, a + m)
            assert torch.equal(got, data[a : a + m])
            # only the producer chunks needed so far have been received
            assert sum(prod[: len(calls)]) >= a + m > sum(prod[: len(calls) - 1])
            a += m
        assert stream.exhausted


def test_diagnose_prefers_the_stage_that_failed_first(tmp_path: Path) -> None:
    log = (
        "Root Cause (first observed failure):\n[0]:\n  time      : x\n  host      : h\n"
        "  rank      : 2 (local_rank: 2)\n  exitcode  : 3 (pid: 12)\n"
        "  rank      : 1 (local_rank: 1)\n  exitcode  : -15 (pid: 11)\n"
    )
    (tmp_path / "error-stage0.json").write_text(
        json.dumps(
            {
                "stage": 0,
                "type": "PeerLostError",
                "message": "stage 0: lost stage 1 while x",
                "secondary": True,
                "peer": 1,
                "time": 1.0,
            }
        )
    )
    stage, why = _diagnose(tmp_path, log)
    assert stage == 2 and "exit code 3" in why
    stage, why = _diagnose(tmp_path, "")
    assert stage == 1 and "stopped responding" in why


def test_execute_inside_an_existing_torchrun_launch(tmp_path: Path) -> None:
    """`torchrun -m umpipe_bench.cli.execute`: every rank runs its stage in-process."""
    import os
    import subprocess
    import sys

    ppath = tmp_path / "tiny.json"
    tiny_problem(ppath)
    root = Path(__file__).resolve().parents[1]
    env = dict(os.environ, OMP_NUM_THREADS="1")
    env["PYTHONPATH"] = os.pathsep.join([str(root), env.get("PYTHONPATH", "")])
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node=2",
            "-m",
            "umpipe_bench.cli.execute",
            "--problem",
            str(ppath),
            "--plan",
            "gpipe:2",
            "--vs",
            "1f1b:4",
            "--iters",
            "2",
            "--warmup",
            "0",
            "--no-peer",
            "--timeout",
            "60",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        cwd=tmp_path,
    )
    assert proc.returncode == 0, proc.stderr[-2000:]
    lines = [ln for ln in proc.stdout.splitlines() if ln.startswith("{")]
    assert len(lines) == 1  # rank 0 reports, rank 1 stays quiet
    rows = json.loads(lines[0])["rows"]
    assert [r["plan"] for r in rows] == ["gpipe:2", "1f1b:4"]
