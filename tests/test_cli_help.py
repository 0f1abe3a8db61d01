"""Every sub-command's --help shows the default of every option that has one."""

from __future__ import annotations

import argparse

import pytest

from umpipe_bench.cli import SUBCOMMANDS, build_parser


def _subparsers() -> dict[str, argparse.ArgumentParser]:
    parser = build_parser(None, lazy=False)  # every sub-command registered in full
    action = next(a for a in parser._actions if isinstance(a, argparse._SubParsersAction))
    return dict(action.choices)


def test_every_subcommand_is_checked():
    assert len(_subparsers()) == len(SUBCOMMANDS)


@pytest.mark.parametrize("name", sorted(_subparsers()))
def test_options_with_a_default_show_it(name):
    sp = _subparsers()[name]
    missing = []
    for a in sp._actions:
        if (not a.option_strings or a.nargs == 0 or a.required
                or a.default is None or a.default is argparse.SUPPRESS):
            continue  # positionals, flags, required options, options without a default
        text = " ".join(sp._get_formatter()._format_action(a).split())
        shown = a.default if isinstance(a.default, (list, tuple)) else [a.default]
        if "default" not in text or not all(str(x) in text for x in shown):
            missing.append(f"{'/'.join(a.option_strings)} (default {a.default!r}): {text}")
    assert not missing, "\n".join(missing)


def test_plan_help_states_the_stop_rule_in_force():
    # the default budget's words come from the rule itself, so they follow its settings
    from umpipe_bench.planners.algorithms._tidgap_settings import SETTLE

    text = " ".join(_subparsers()["plan"].format_help().split())
    assert (f"until {SETTLE.patience} in a row gain less than {100 * SETTLE.tolerance:g} %"
            in text), text
    assert f"at least {SETTLE.min_rounds} rounds, at most {SETTLE.max_rounds}" in text
    assert f"at most {SETTLE.seconds:g} s" in text
