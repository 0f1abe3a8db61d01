"""Every script under scripts/ (the commands that regenerate committed results) parses its
arguments: ``--help`` exits 0 with a usage line; shell scripts pass ``bash -n``."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
TOOLS = ROOT / "scripts"
PY = sorted(TOOLS.glob("*.py"))
SH = sorted(TOOLS.glob("*.sh"))


def test_there_are_tools():
    assert len(PY) >= 10 and SH


@pytest.mark.slow
@pytest.mark.parametrize("path", PY, ids=lambda p: p.name)
def test_python_tool_help(path):
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, str(path), "--help"], cwd=ROOT, env=env,
                       capture_output=True, text=True, timeout=300, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    assert r.stdout.startswith("usage:"), r.stdout[:200]


@pytest.mark.parametrize("path", SH, ids=lambda p: p.name)
def test_shell_tool_parses(path):
    r = subprocess.run(["bash", "-n", str(path)], capture_output=True, text=True, check=False)
    assert r.returncode == 0, r.stderr
