"""The planners' settings tables (planners/search/settings.py): docs/SETTINGS.md is generated
from them, every default lies in its own range, and a value outside a range fails when the
planner is built, in one line that names the planner, the setting and what it accepts."""

from __future__ import annotations

from pathlib import Path

import pytest

from umpipe_bench.cli import main
from umpipe_bench.planners.search.base import PlannerError
from umpipe_bench.planners.search.settings import SettingsTable
from umpipe_bench.planners.search.settings_doc import planner_tables, settings_markdown
from umpipe_bench.registry import get_planner, get_planner_class, planner_names

ROOT = Path(__file__).resolve().parents[1]


def test_the_settings_doc_is_generated_from_the_tables():
    """Regenerate with: python -m umpipe_bench.planners.search.settings_doc > docs/SETTINGS.md"""
    committed = (ROOT / "docs/SETTINGS.md").read_text(encoding="utf-8")
    assert committed == settings_markdown(planner_tables())


@pytest.mark.parametrize("name", planner_names())
def test_a_planner_with_settings_declares_a_table_whose_defaults_are_valid(name):
    table = getattr(get_planner_class(name), "defaults", None)
    if table is None or not len(table):
        return  # no settings of its own (tidgap-tuned: tidgap's)
    assert isinstance(table, SettingsTable)
    for row in table.rows.values():
        assert row.check(name, row.default) == row.default, row.name
        assert row.effect and "\n" not in row.effect


#: Values outside a setting's range that were accepted when the planner was built: they
#: failed later, mid-run or inside a library, or not at all.
OUT_OF_RANGE = [
    ("random-search", {"backend": "fast"}, "backend must be 'auto', 'numba'"),
    ("optuna-tpe", {"n_startup_trials": -1}, "n_startup_trials must be >= 0"),
    ("optuna-tpe", {"backend": "fast"}, "backend must be 'auto'"),
    ("exact", {"schedule": "all"}, "schedule must be 'auto', 'capped' or 'gpipe'"),
    ("exact", {"max_evaluations": 0}, "max_evaluations must be >= 1"),
    ("cmaes", {"sigma0": 0}, "sigma0 must be > 0"),
    ("optuna-cmaes", {"sigma0": -1}, "sigma0 must be > 0"),
    ("optuna-ga", {"crossover_prob": 1.5}, r"crossover_prob must be in \[0, 1\]"),
]


@pytest.mark.parametrize("name, settings, message", OUT_OF_RANGE)
def test_a_value_out_of_range_fails_at_construction_in_one_line(name, settings, message):
    with pytest.raises(PlannerError, match=message) as info:
        get_planner(name, **settings)
    text = str(info.value)
    assert "\n" not in text and text.startswith(f"planner {name!r}: ")
    assert text.endswith(f"got {next(iter(settings.values()))!r}")


@pytest.mark.parametrize("name, settings, message", [
    ("tidgap", {"race": 0}, r"race must be in \(0, 1\], got 0"),
    ("tidgap", {"revive": "1.5"}, r"revive must be 'auto' or a number in \[0, 1\]"),
    ("tidgap", {"threads": 0}, "threads must be 'auto' or an integer >= 1"),
    ("tidgap", {"backend": "fast"}, "backend must be"),
    ("dgap", {"cxpb": 2}, r"cxpb must be in \[0, 1\]"),
    ("dgap", {"schedule": "1f1b"}, "schedule must be"),
])
def test_the_search_planners_name_the_range_too(name, settings, message):
    with pytest.raises(PlannerError, match=message):
        get_planner(name, **settings)


def test_the_cli_turns_an_out_of_range_setting_into_one_line_and_exit_2(capsys):
    rc = main(["plan", "--problem", "sim-s2-b8-s0", "--planner", "random-search", "--set",
               "batch=0"])
    err = capsys.readouterr().err
    assert rc == 2
    assert err.strip().splitlines() == [
        "umpipe-bench plan: error: planner 'random-search': batch must be >= 1, got '0'"]


@pytest.mark.parametrize("value", ["1e400", "inf", "-inf", "nan"])
def test_an_integer_setting_that_is_not_finite_is_one_line(value):
    from umpipe_bench.planners.search.settings import coerce

    with pytest.raises(PlannerError, match=f"setting population={value!r} is not a valid int"):
        coerce("tidgap", "population", value, 64)
