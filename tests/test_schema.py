"""The schema layer: problem, plan, matrix and best-known files and the API's inputs are checked
once, at the edge, and a bad one gives one line naming the file, the field, what was expected
and what was found (exit code 2 on the command line, no traceback)."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from umpipe_bench import schema as sc
from umpipe_bench.bench.best_known import BestKnown, BestKnownError
from umpipe_bench.bench.config import ConfigError, load_config, parse_config
from umpipe_bench.cli import main
from umpipe_bench.errors import UmpipeError
from umpipe_bench.plan import Plan, PlanError
from umpipe_bench.problem import Problem, ProblemError
from umpipe_bench.registry import get_planner, get_problem, planner_names

ROOT = Path(__file__).resolve().parents[1]
PROFILED = ROOT / "umpipe_bench/problems/data/gpt1-mini-s2.json"


def _one_line_error(capsys, rc: int, *needles: str) -> str:
    err = capsys.readouterr().err
    assert rc == 2, err
    lines = [ln for ln in err.splitlines() if ln.strip()]
    assert len(lines) == 1 and "error:" in lines[0], err
    assert "Traceback" not in err
    for n in needles:
        assert n in lines[0], lines[0]
    return lines[0]


def _problem_dict() -> dict:
    return json.loads(PROFILED.read_text())


def _plan_file(tmp_path: Path, problem: str = "sim-s2-b8-s0") -> Path:
    out = tmp_path / "plan.json"
    assert main(["plan", "--problem", problem, "--planner", "gpipe", "--out", str(out)]) == 0
    return out


# ----------------------------------------------------------------- the checker itself
SPEC = sc.Obj((
    sc.Field("n", sc.Int(1, 8), required=True),
    sc.Field("x", sc.Num(lo=0, lo_open=True)),
    sc.Field("tags", sc.List(sc.Str(), unique=True)),
    sc.Field("inner", sc.Obj((sc.Field("far", sc.Num()),))),
    sc.Field("extra", sc.Map()),
))


@pytest.mark.parametrize(("data", "message"), [
    ({}, "where: field 'n': missing; expected an integer in 1..8"),
    ({"n": True}, "where: field 'n': expected an integer in 1..8, got boolean true"),
    ({"n": 2.0}, "where: field 'n': expected an integer in 1..8, got number 2.0"),
    ({"n": 9}, "where: field 'n': expected an integer in 1..8, got number 9"),
    ({"n": 1, "x": float("inf")}, "field 'x': expected a finite number > 0, got number inf"),
    ({"n": 1, "tags": ["a", "a"]}, "field 'tags[1]': 'a' is listed twice (also at [0])"),
    ({"n": 1, "inner": {"fra": 1}}, "field 'inner.fra': unknown field; did you mean 'far'?"),
    ({"n": 1, "extra": [1]}, "field 'extra': expected an object (a mapping of names to "
     "values), got a list of 1"),
    ([], "where: expected an object, got a list of 0"),
])
def test_check_reports_the_first_problem_in_one_line(data, message):
    with pytest.raises(ProblemError) as exc:
        sc.check(data, SPEC, "where", ProblemError)
    assert message in str(exc.value)
    assert "\n" not in str(exc.value)


def test_files_decode_as_utf8_and_name_the_offset_line_and_column(tmp_path):
    f = tmp_path / "x.json"
    f.write_bytes(b'{"a":\n "\xff"}')
    with pytest.raises(UmpipeError, match=r"x: not UTF-8 text: byte 0xff at offset 8 \(line 2\)"):
        sc.load_json(f, "x")
    f.write_text('{"a": 1,\n "b": }')
    with pytest.raises(UmpipeError, match="x: not valid JSON: .* at line 2, column 7"):
        sc.load_json(f, "x")
    f.write_text('{"a": 1, "a": 2}')
    with pytest.raises(UmpipeError, match="key 'a' appears twice"):
        sc.load_json(f, "x")
    t = tmp_path / "x.toml"
    t.write_text("[bench]\nname = \n")
    with pytest.raises(UmpipeError, match=r"x: not valid TOML: .*line 2, column 8"):
        sc.load_toml(t, "x")


# ----------------------------------------------------------------- non-UTF-8 files
def test_non_utf8_problem_plan_and_matrix_files_are_one_line(tmp_path, capsys):
    prob = tmp_path / "p.json"
    prob.write_bytes(PROFILED.read_bytes().replace(b'"name"', b'"n\xffame"', 1))
    rc = main(["simulate", "--problem", str(prob), "--plan", "gpipe:2"])
    _one_line_error(capsys, rc, str(prob), "not UTF-8", "0xff", "offset")
    plan = _plan_file(tmp_path)
    capsys.readouterr()
    plan.write_bytes(plan.read_bytes().replace(b'"mode"', b'"mo\xe9de"'))
    rc = main(["simulate", "--problem", "sim-s2-b8-s0", "--plan", str(plan)])
    _one_line_error(capsys, rc, str(plan), "not UTF-8", "0xe9")
    toml = tmp_path / "m.toml"
    toml.write_bytes(b'[bench]\nname = "a\xff"\n')
    rc = main(["bench", "--config", str(toml), "--list"])
    _one_line_error(capsys, rc, str(toml), "not UTF-8", "0xff")


# ----------------------------------------------------------------- wrong-typed optional fields
@pytest.mark.parametrize(("where", "value", "needle"), [
    ("provenance", [1, 2], "field 'provenance': expected an object"),
    ("extra", 5, "field 'stages[0].extra': expected an object"),
    ("extra", ["a"], "field 'stages[0].extra': expected an object"),
    ("description", 3, "field 'description': expected a string"),
])
def test_wrong_typed_optional_problem_fields_are_one_line(tmp_path, capsys, where, value,
                                                          needle):
    d = _problem_dict()
    if where == "extra":
        d["stages"][0]["extra"] = value
    else:
        d[where] = value
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    rc = main(["simulate", "--problem", str(f), "--plan", "gpipe:2"])
    _one_line_error(capsys, rc, str(f), needle)


@pytest.mark.parametrize("meta", [[1], 3, "x"])
def test_wrong_typed_plan_meta_is_one_line(tmp_path, capsys, meta):
    plan = _plan_file(tmp_path)
    d = json.loads(plan.read_text())
    d["meta"] = meta
    plan.write_text(json.dumps(d))
    capsys.readouterr()
    rc = main(["simulate", "--problem", "sim-s2-b8-s0", "--plan", str(plan)])
    _one_line_error(capsys, rc, str(plan), "field 'meta': expected an object of metadata")


def test_unknown_schedule_in_a_plan_file_is_one_line(tmp_path, capsys):
    plan = _plan_file(tmp_path)
    d = json.loads(plan.read_text())
    d["meta"]["schedule"] = "zigzag"
    plan.write_text(json.dumps(d))
    capsys.readouterr()
    rc = main(["simulate", "--problem", "sim-s2-b8-s0", "--plan", str(plan)])
    _one_line_error(capsys, rc, "field 'meta.schedule'", "'gpipe', '1f1b', 'capped'",
                    "'zigzag'")


# ----------------------------------------------------------------- misspelt optional keys
def test_a_misspelt_optional_key_is_refused_with_the_close_name(tmp_path, capsys):
    """``bwd_fra`` for ``bwd_far`` used to be ignored, changing T by 27 % without a word."""
    d = _problem_dict()
    for st in d["stages"]:
        st["bwd_fra"] = 0.5
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    rc = main(["simulate", "--problem", str(f), "--plan", "gpipe:4"])
    _one_line_error(capsys, rc, "field 'stages[0].bwd_fra': unknown field",
                    "did you mean 'bwd_far'")
    d["stages"][0].pop("bwd_fra")
    d["stages"][0]["memory"]["capacity_byte"] = 1e9
    f.write_text(json.dumps(d))
    with pytest.raises(ProblemError, match="'stages\\[0\\].memory.capacity_byte'.*'capacity_bytes'"):
        Problem.load(f)


def test_problem_files_obey_the_limits_of_generated_problems(tmp_path):
    d = _problem_dict()
    d["B"] = 4096
    d["sizes"][-1] = 4096
    f = tmp_path / "p.json"
    f.write_text(json.dumps(d))
    with pytest.raises(ProblemError, match="field 'B': expected an integer in 1..2048"):
        Problem.load(f)
    d = _problem_dict()
    d["stages"] = d["stages"] * 65  # 130 stages
    f.write_text(json.dumps(d))
    with pytest.raises(ProblemError, match="field 'stages': expected a list of 1 to 128"):
        Problem.load(f)


# ----------------------------------------------------------------- a plan's problem
def test_a_plan_made_for_another_problem_of_the_same_shape_is_refused(tmp_path, capsys):
    plan = _plan_file(tmp_path, "sim-s2-b8-s0")
    assert json.loads(plan.read_text())["meta"]["problem_digest"] == \
        get_problem("sim-s2-b8-s0").digest(capacities=False)
    capsys.readouterr()
    rc = main(["simulate", "--problem", "sim-s2-b8-s1", "--plan", str(plan)])
    _one_line_error(capsys, rc, "made for problem 'sim-s2-b8-s0'",
                    "not for problem 'sim-s2-b8-s1'", "--force-plan")
    assert main(["simulate", "--problem", "sim-s2-b8-s1", "--plan", str(plan),
                 "--force-plan"]) == 0
    err = capsys.readouterr().err
    assert err.startswith("warning: ") and "sim-s2-b8-s0" in err and "sim-s2-b8-s1" in err
    # the plan's own problem, with or without a memory cap: no word
    assert main(["simulate", "--problem", "sim-s2-b8-s0", "--plan", str(plan)]) == 0
    assert main(["simulate", "--problem", "sim-s2-b8-s0", "--plan", str(plan),
                 "--memory-cap", "1TiB"]) == 0
    assert capsys.readouterr().err == ""


def test_another_version_of_the_same_problem_is_refused(tmp_path):
    prob = get_problem("sim-s2-b8-s0")
    plan = Plan.load(_plan_file(tmp_path))
    with pytest.raises(PlanError, match="another version of problem 'sim-s2-b8-s0'"):
        plan.check_problem(prob.with_bwd_far(2.0))


def test_old_plan_files_without_a_digest_warn_only_when_the_name_differs(tmp_path, capsys):
    path = _plan_file(tmp_path)
    d = json.loads(path.read_text())
    del d["meta"]["problem_digest"]
    path.write_text(json.dumps(d))
    capsys.readouterr()
    assert main(["simulate", "--problem", "sim-s2-b8-s1", "--plan", str(path)]) == 0
    assert "warning: " in capsys.readouterr().err
    assert main(["simulate", "--problem", "sim-s2-b8-s0", "--plan", str(path)]) == 0
    assert capsys.readouterr().err == ""
    del d["meta"]["problem"]
    path.write_text(json.dumps(d))
    assert main(["simulate", "--problem", "sim-s2-b8-s1", "--plan", str(path)]) == 0
    assert capsys.readouterr().err == ""


# ----------------------------------------------------------------- seeds
SEARCHING = [n for n in planner_names() if n not in ("gpipe", "1f1b", "exact")]


@pytest.mark.parametrize("seed", ["-1", "1.5", "abc", "4294967296"])
def test_a_bad_seed_option_is_one_line(capsys, seed):
    rc = main(["plan", "--problem", "sim-s2-b8-s0", "--planner", "tidgap", f"--seed={seed}",
               "--budget", "evals:100"])
    _one_line_error(capsys, rc, "--seed", "0..4294967295")


@pytest.mark.parametrize("name", SEARCHING)
@pytest.mark.parametrize("seed", [-1, True, 1.5, 2**32])
def test_every_planner_refuses_a_bad_seed_before_any_work(name, seed):
    with pytest.raises(UmpipeError, match="a seed must be an integer in 0..4294967295"):
        get_planner(name).plan(get_problem("sim-s2-b8-s0"), budget="evals:50", seed=seed)


def test_a_matrix_refuses_negative_and_boolean_seeds():
    for seeds in ([-3], [0, True], [1.0]):
        with pytest.raises(ConfigError, match=r"bench\.seeds\[\d\]': expected a seed"):
            parse_config({"bench": {"problems": ["sim-s2-b8-s0"], "seeds": seeds},
                          "planners": [{"name": "tidgap"}]}, "m.toml")


# ----------------------------------------------------------------- duplicate cells
@pytest.mark.parametrize(("bench", "planners", "needle"), [
    ({"seeds": [0, 0]}, [{"name": "tidgap"}], "'bench.seeds[1]': 0 is listed twice"),
    ({"modes": ["stash", "stash"]}, [{"name": "tidgap"}], "'bench.modes[1]'"),
    ({"budgets": ["evals:2000,secs:10", "secs:10,evals:2000"]}, [{"name": "tidgap"}],
     "'bench.budgets[1]': 'secs:10,evals:2000' is the same as [0]"),
    ({}, [{"name": "tidgap", "seeds": [1, 2, 1]}], "'planners[0].seeds[2]'"),
    ({}, [{"name": "tidgap"}, {"name": "tidgap", "label": "again"}],
     "'planners[1]' repeats planners[0]"),
])
def test_a_matrix_that_lists_a_cell_twice_is_refused(bench, planners, needle):
    with pytest.raises(ConfigError, match="m.toml: ") as exc:
        parse_config({"bench": {"problems": ["sim-s2-b8-s0"], **bench}, "planners": planners},
                     "m.toml")
    assert needle in str(exc.value)


def test_same_planner_with_other_settings_or_disjoint_seeds_is_not_a_duplicate():
    cfg = parse_config({"bench": {"problems": ["sim-s2-b8-s0"], "seeds": [0, 1]}, "planners": [
        {"name": "tidgap"}, {"name": "tidgap", "label": "p64", "settings": {"population": 64}},
        {"name": "tidgap", "label": "s2", "seeds": [2]}]}, "m.toml")
    cells = cfg.cells()
    assert len(cells) == len({(c.planner, c.seed, c.settings_hash) for c in cells}) == 5


# ----------------------------------------------------------------- the API
def test_the_api_checks_problem_and_plan_mappings():
    from umpipe_bench.api import GenomeSpace, PipelineObjective

    d = _problem_dict()
    d["stages"][1]["extra"] = [1]
    with pytest.raises(ProblemError, match="problem: field 'stages\\[1\\].extra'"):
        PipelineObjective(d)
    with pytest.raises(ProblemError, match="expected a Problem"):
        PipelineObjective(3.5)  # type: ignore[arg-type]
    assert PipelineObjective(_problem_dict()).problem.name == "gpt1-mini-s2"
    space = GenomeSpace(2, 8, "stash", "gpipe")
    with pytest.raises(PlanError, match="plan: field 'fwd\\[0\\]\\[0\\]'"):
        space.from_plan({"schema": "umpipe-plan/1", "mode": "stash", "fwd": [[0.5, 7.5]] * 2,
                         "bwd": [[4, 4]] * 2})
    with pytest.raises(PlanError, match="the genome space has S = 2, B = 8"):
        space.from_plan(Plan.edp(2, 16, 2))
    assert len(space.from_plan(Plan.edp(2, 8, 2).to_dict())) == space.dimension


# ----------------------------------------------------------------- every committed file
def _committed(*patterns: str) -> list[str]:
    out = subprocess.run(["git", "ls-files", *patterns], cwd=ROOT, capture_output=True,
                         text=True, check=True).stdout.split()
    if not out:
        pytest.skip("not a git checkout")
    return out


def test_every_committed_file_loads_through_the_schema():
    """Problems, plans, best-known and matrix files of the repository (data, registry,
    results, test fixtures) load as they did: the schema refuses nothing valid."""
    kinds: dict[str, int] = {}
    for rel in _committed("*.json", "*.toml"):
        path = ROOT / rel
        if rel.endswith(".toml"):
            if rel.startswith("umpipe_bench/"):
                load_config(path)
                kinds["matrix"] = kinds.get("matrix", 0) + 1
            else:
                sc.load_toml(path, rel)
            continue
        data = sc.load_json(path, rel)
        schema = data.get("schema") if isinstance(data, dict) else None
        if schema == "umpipe-problem/1":
            Problem.load(path)
        elif schema == "umpipe-plan/1":
            Plan.load(path)
        elif schema == "umpipe-best-known/1":
            BestKnown(path)
        kinds[str(schema)] = kinds.get(str(schema), 0) + 1
    assert kinds["umpipe-problem/1"] >= 9 and kinds["umpipe-plan/1"] >= 148
    assert kinds["umpipe-best-known/1"] == 1 and kinds["matrix"] >= 5


def test_a_malformed_best_known_file_names_the_entry(tmp_path):
    src = ROOT / "umpipe_bench/problems/best_known.json"
    d = json.loads(src.read_text())
    d["entries"][3]["valu"] = d["entries"][3].pop("value")
    f = tmp_path / "best_known.json"
    f.write_text(json.dumps(d))
    with pytest.raises(BestKnownError, match="field 'entries\\[3\\].value': missing"):
        BestKnown(f)
    d = json.loads(src.read_text())
    d["entries"].append(d["entries"][0])
    f.write_text(json.dumps(d))
    with pytest.raises(BestKnownError, match="has an entry already"):
        BestKnown(f)


def test_plan_files_name_the_schedules_the_simulator_knows():
    from umpipe_bench.plan import SCHEDULE_NAMES
    from umpipe_bench.schedules import SCHEDULES

    assert tuple(SCHEDULES) == SCHEDULE_NAMES
