"""Bad input gets one line naming the option and exit code 2, never a traceback, and nothing
is left behind: a traceback, a vague message or a side effect would each be a bug.
"""

from __future__ import annotations

import multiprocessing
import os
from pathlib import Path

import pytest

from umpipe_bench.cli import main

TUNE_FAST = ["--train", "sim-s2-b8-s0", "--heldout", "sim-s2-b8-s1", "--seeds", "0",
             "--modes", "stash", "--budget", "evals:40", "--no-progress"]


def _one_line_error(capsys, rc: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0], err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def test_unknown_problem_is_one_line(capsys):
    rc = main(["simulate", "--problem", "nope", "--plan", "gpipe:2"])
    _one_line_error(capsys, rc, "unknown problem 'nope'", "sim-s{S}-b{B}-s{seed}")


def test_plan_out_to_a_folder_fails_before_planning(tmp_path, capsys):
    rc = main(["plan", "--problem", "sim-s2-b8-s0", "--planner", "gpipe", "--out",
               str(tmp_path)])
    _one_line_error(capsys, rc, "--out", "is a folder")


def test_simulate_gantt_to_an_unwritable_place(capsys):
    rc = main(["simulate", "--problem", "sim-s2-b8-s0", "--plan", "gpipe:2", "--gantt",
               "/proc/umpipe-g.png"])
    _one_line_error(capsys, rc, "--gantt", "/proc/umpipe-g.png")


def test_profile_out_to_a_folder_fails_before_profiling(tmp_path, capsys, monkeypatch):
    import umpipe_bench.profiler.profile as prof

    def boom(*a, **k):
        raise AssertionError("profiled although the output cannot be written")

    monkeypatch.setattr(prof, "profile_model", boom)
    rc = main(["profile", "tiny-mlp", "-B", "4", "--out", str(tmp_path)])
    _one_line_error(capsys, rc, "--out", "is a folder")


def test_report_in_a_folder(tmp_path, capsys):
    rc = main(["report", "--in", str(tmp_path), "--no-plots"])
    _one_line_error(capsys, rc, "is a folder")


def test_report_on_wrong_columns_names_them(tmp_path, capsys):
    path = tmp_path / "wrong.csv"
    path.write_text("a,b\n1,2\n")
    rc = main(["report", "--in", str(path), "--no-plots"])
    line = _one_line_error(capsys, rc, "missing columns")
    assert not line.endswith("error: error")


@pytest.mark.parametrize("url, needle", [
    ("banana://x", "no database kind 'banana'"),
    ("postgresql+pg8000://user@localhost/db", "driver"),  # a driver no extra installs
    ("not a url", "not a database URL"),
])
def test_tune_storage_errors(tmp_path, capsys, url, needle):
    rc = main(["tune", *TUNE_FAST, "--trials", "1", "--storage", url,
               "--save", str(tmp_path / "t.json"), "--report", str(tmp_path / "t.md")])
    _one_line_error(capsys, rc, "--storage", needle)


def test_tune_sqlite_in_a_missing_folder_creates_nothing(tmp_path, capsys):
    db = tmp_path / "no" / "such" / "x.db"
    rc = main(["tune", *TUNE_FAST, "--trials", "1", "--storage", f"sqlite:///{db}",
               "--no-judge"])
    _one_line_error(capsys, rc, "does not exist")
    assert not (tmp_path / "no").exists()


@pytest.mark.parametrize("extra, needle", [
    (["--planner", "gpipe"], "nothing to tune"),
    (["--budget", "banana"], "budget 'banana'"),
])
def test_tune_bad_planner_or_budget_leaves_no_study(tmp_path, capsys, extra, needle):
    db = tmp_path / "t.db"
    rc = main(["tune", *TUNE_FAST, *extra, "--trials", "1", "--storage", f"sqlite:///{db}",
               "--no-judge"])
    _one_line_error(capsys, rc, needle)
    assert not db.exists() or os.path.getsize(db) == 0


def _open(db: str, barrier, q) -> None:
    from umpipe_bench.bench.tune import TuneSpec, open_study

    spec = TuneSpec(train=("sim-s2-b8-s0",), heldout=("sim-s2-b8-s1",), budget="evals:40")
    barrier.wait()
    try:
        open_study(spec, f"sqlite:///{db}", "race", 0)
        q.put("ok")
    except BaseException as exc:  # report, do not hang the parent
        q.put(f"{type(exc).__name__}: {exc}"[:300])


def test_two_tune_workers_on_a_new_sqlite_file(tmp_path):
    pytest.importorskip("optuna")
    ctx = multiprocessing.get_context("fork")
    barrier, q = ctx.Barrier(2), ctx.Queue()
    db = str(tmp_path / "new.db")
    procs = [ctx.Process(target=_open, args=(db, barrier, q)) for _ in range(2)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(timeout=120)
    assert [q.get(timeout=5) for _ in procs] == ["ok", "ok"]


def test_plan_sizes_must_be_integers(tmp_path, capsys):
    import json

    from umpipe_bench.plan import Plan

    path = tmp_path / "p.json"
    Plan.edp(2, 8, 2).save(path)
    for bad in (4.5, "4", True):
        d = json.loads(path.read_text())
        d["fwd"][0] = [bad, 4] if bad is not True else [bad, 7]
        d["bwd"][0] = d["fwd"][0]
        (tmp_path / "bad.json").write_text(json.dumps(d))
        rc = main(["simulate", "--problem", "sim-s2-b8-s0", "--plan", str(tmp_path / "bad.json")])
        _one_line_error(capsys, rc, "fwd[0][0]", "integer")


def test_wrong_sum_blames_the_stage_that_sums_wrong(capsys, tmp_path):
    import json

    from umpipe_bench.plan import Plan

    d = Plan.edp(2, 8, 2).to_dict()
    d["fwd"][0] = [4, 3]
    d["bwd"][0] = [4, 3]
    (tmp_path / "bad.json").write_text(json.dumps(d))
    rc = main(["simulate", "--problem", "sim-s2-b8-s0", "--plan", str(tmp_path / "bad.json")])
    line = _one_line_error(capsys, rc, "stage 0")
    assert "stage 1" not in line


def test_execute_nccl_without_cuda(capsys, tmp_path):
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("this machine has CUDA")
    from tests.test_runtime import tiny_problem

    tiny_problem(tmp_path / "tiny.json")
    rc = main(["execute", "--problem", str(tmp_path / "tiny.json"), "--plan", "gpipe:2",
               "--backend", "nccl", "--run-dir", str(tmp_path / "run")])
    _one_line_error(capsys, rc, "nccl", "CUDA")
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("opt, value", [("--dtype", "float13"), ("--optimizer", "lion9")])
def test_execute_checks_dtype_and_optimizer_before_launching(capsys, tmp_path, opt, value):
    pytest.importorskip("torch")
    from tests.test_runtime import tiny_problem

    tiny_problem(tmp_path / "tiny.json")
    rc = main(["execute", "--problem", str(tmp_path / "tiny.json"), "--plan", "gpipe:2",
               opt, value, "--run-dir", str(tmp_path / "run")])
    _one_line_error(capsys, rc, opt.lstrip("-"), value)
    assert not (tmp_path / "run").exists()


@pytest.mark.slow  # launches the stage processes
def test_execute_leaves_no_temporary_folder(tmp_path, monkeypatch):
    pytest.importorskip("torch")
    from tests.test_runtime import tiny_problem

    monkeypatch.setenv("TMPDIR", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    tiny_problem(tmp_path / "tiny.json")
    rc = main(["execute", "--problem", str(tmp_path / "tiny.json"), "--plan", "gpipe:2",
               "--no-peer", "--iters", "1", "--warmup", "0"])
    assert rc == 0
    assert list((tmp_path / "tmp").glob("umpipe-execute-*")) == []


def test_spec_dtype_names_are_the_stages_dtypes():
    pytest.importorskip("torch")
    from umpipe_bench.runtime.spec import DTYPE_NAMES
    from umpipe_bench.runtime.stages import DTYPES

    assert tuple(DTYPES) == DTYPE_NAMES


def _leaderboard(tmp_path: Path) -> Path:
    cfg = tmp_path / "m.toml"
    cfg.write_text('[bench]\nproblems = ["sim-s2-b8-s0"]\nseeds = [0, 1]\n'
                   'budgets = ["evals:50"]\n[[planners]]\nname = "tests.test_bench:EdpPlanner"\n'
                   'settings = { M = 2 }\n')
    assert main(["bench", "--config", str(cfg), "--out", str(tmp_path / "o"),
                 "--no-progress"]) == 0
    return tmp_path / "o" / "leaderboard.csv"


def test_report_warns_about_a_truncated_row(tmp_path, capsys):
    path = _leaderboard(tmp_path)
    text = path.read_text()
    path.write_text(text[: len(text) - len(text.splitlines()[-1]) // 2 - 1] + "\n")
    capsys.readouterr()
    rc = main(["report", "--in", str(path), "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 0
    assert "warning" in err and "line 3" in err
    assert "1 malformed line" in (tmp_path / "o" / "report.md").read_text()


def test_paths_helper_rejects_a_file_as_folder(tmp_path):
    from umpipe_bench.cli._paths import check_output_dir
    from umpipe_bench.errors import UmpipeError

    f = tmp_path / "f"
    f.write_text("x")
    with pytest.raises(UmpipeError, match="is a file"):
        check_output_dir(f, "--out")
    assert Path(tmp_path).is_dir()


def test_paths_helper_accepts_an_existing_file_to_overwrite(tmp_path):
    """`profile --out umpipe_bench/problems/data/x.json` over the committed file must be allowed (it was
    refused as "is not a folder": the check started from the file instead of its folder)."""
    from umpipe_bench.cli._paths import check_output_file
    from umpipe_bench.errors import UmpipeError

    f = tmp_path / "profile.json"
    f.write_text("{}")
    check_output_file(f, "--out")  # no error
    with pytest.raises(UmpipeError, match="does not exist"):  # an output file's folder is not
        check_output_file(tmp_path / "new" / "deeper" / "p.json", "--out")  # made for it
    assert not (tmp_path / "new").exists()
    blocker = tmp_path / "blocker"
    blocker.write_text("x")
    with pytest.raises(UmpipeError, match="not a folder|Not a directory"):
        check_output_file(blocker / "p.json", "--out")


@pytest.mark.parametrize("extra, needle", [
    (["--set", "layers=1"], "layers"),
    (["--layers-per-stage", "1,1"], "layers_per_stage"),
])
def test_profile_bad_settings_are_one_line(tmp_path, capsys, extra, needle):
    pytest.importorskip("torch")
    rc = main(["profile", "tiny-mlp", "-B", "4", "--no-progress", "--link-latency", "0",
               "--link-bandwidth", "1e9", "--out", str(tmp_path / "p.json"), *extra])
    _one_line_error(capsys, rc, needle)


def test_unknown_model_is_one_line(tmp_path, capsys):
    pytest.importorskip("torch")
    rc = main(["profile", "no-such-model", "-B", "4", "--out", str(tmp_path / "p.json")])
    _one_line_error(capsys, rc, "unknown model")
