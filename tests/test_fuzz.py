"""The fuzz harness: generated bad inputs for every sub-command (cases in ``fuzz_cases.py``).

Each case must end with exit code 0, 1, 2, 130 or 143, print no traceback, not hang, and leave
everything outside its working folder as it was (inputs, the repository, /dev/null and
/dev/full keep their content and kind; symlinks stay symlinks). The fast tier runs a fixed few
light cases per sub-command; the slow tier (CI) a quarter of every sub-command's cases,
torch-launching ones included (``UMPIPE_FUZZ=all``: every case).
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).parent))
import fuzz_cases

COMMANDS = ("problems", "simulate", "schedules", "plan", "bench", "report", "best-known",
            "tune", "study", "execute", "profile")


@pytest.fixture(scope="module")
def fuzz(tmp_path_factory):
    ins = fuzz_cases.make_inputs(tmp_path_factory.mktemp("fuzz"))
    cases = fuzz_cases.all_cases(ins)
    return ins, cases, fuzz_cases.repo_snapshotter()


def _check(ins, cases, snap) -> None:
    failures = []
    for case in cases:
        out = fuzz_cases.run_case(case, ins, snap)
        if out.problems:
            tail = out.stderr.strip().splitlines()[-1:] if out.stderr.strip() else []
            failures.append(f"{case.id}: {'; '.join(out.problems)}\n  argv: "
                            f"{' '.join(case.argv)[:200]}\n  stderr: {tail}")
    assert not failures, f"{len(failures)} of {len(cases)} cases failed:\n" + "\n".join(failures)


def test_every_command_has_cases(fuzz):
    _, cases, _ = fuzz
    assert {c.command for c in cases} == set(COMMANDS)
    fast = fuzz_cases.fast_slice(cases)
    assert {c.command for c in fast} == set(COMMANDS) - {"execute", "profile"}
    assert len({c.id for c in cases}) > 0.9 * len(cases)  # labels tell the cases apart


@pytest.mark.parametrize("command", [c for c in COMMANDS if c not in ("execute", "profile")])
def test_fuzz_fast_slice(fuzz, command):
    ins, cases, snap = fuzz
    _check(ins, [c for c in fuzz_cases.fast_slice(cases) if c.command == command], snap)


@pytest.mark.slow
@pytest.mark.parametrize("command", COMMANDS)
def test_fuzz_ci_slice(fuzz, command):
    ins, cases, snap = fuzz
    chosen = cases if os.environ.get("UMPIPE_FUZZ") == "all" else fuzz_cases.ci_slice(cases)
    _check(ins, [c for c in chosen if c.command == command], snap)
