"""Start-up: the CLI's light commands import no heavy library; numba kernels are cached on
disk, so a second process compiles nothing (docs/ARCHITECTURE.md)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
HEAVY = ("numba", "torch", "optuna", "pydantic", "matplotlib")


def _python(code: str, env: dict[str, str] | None = None) -> str:
    e = {**os.environ, "PYTHONPATH": str(ROOT), **(env or {})}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=e,
                         cwd=ROOT, timeout=300, check=True)
    return out.stdout.strip().splitlines()[-1]


@pytest.mark.parametrize("argv", [["--help"], ["problems"], ["plan", "--help"]])
def test_light_commands_import_nothing_heavy(argv):
    code = (
        "import contextlib, io, json, sys\n"
        "from umpipe_bench.cli import main\n"
        "with contextlib.redirect_stdout(io.StringIO()):\n"
        "    try:\n"
        f"        main({argv!r})\n"
        "    except SystemExit:\n"
        "        pass\n"
        f"print(json.dumps([m for m in {HEAVY!r} if m in sys.modules]))\n"
    )
    assert json.loads(_python(code)) == []


def test_tune_help_still_lists_its_options():
    code = (
        "import contextlib, io\n"
        "from umpipe_bench.cli import main\n"
        "buf = io.StringIO()\n"
        "with contextlib.redirect_stdout(buf):\n"
        "    try:\n"
        "        main(['tune', '--help'])\n"
        "    except SystemExit:\n"
        "        pass\n"
        "print('--heldout' in buf.getvalue() and '--storage' in buf.getvalue())\n"
    )
    assert _python(code) == "True"


@pytest.mark.slow
def test_second_process_compiles_no_kernel(tmp_path):
    code = (
        "import json\n"
        "import numpy as np\n"
        "from umpipe_bench.planners.evaluation import _family_kernels, _kernels, _random_kernels\n"
        "from umpipe_bench.planners.search import _variation\n"
        "from umpipe_bench.planners.evaluation.encoding import random_bits\n"
        "from umpipe_bench.planners.algorithms.tidgap import TiDGAP\n"
        "from umpipe_bench.synthetic import synthetic_problem\n"
        "for schedule in ('family', 'gpipe'):\n"
        "    TiDGAP(population=8, schedule=schedule).plan(synthetic_problem(3, 6, 0),"
        " mode='recompute', budget='gens:12', seed=0)\n"
        "random_bits(np.random.default_rng(0), 4, 3, 6)\n"
        "fns = [_kernels.forward_pass, _kernels.backward_pass, _variation.vary,"
        " _variation.elite_rows, _family_kernels.family_pass, _random_kernels.bernoulli_rows]\n"
        "print(json.dumps([[sum(f.stats.cache_hits.values()) > 0,"
        " sum(f.stats.cache_misses.values())] for f in fns]))\n"
    )
    env = {"NUMBA_CACHE_DIR": str(tmp_path)}
    _python(code, env)  # first process: compiles and writes the cache
    assert json.loads(_python(code, env)) == [[True, 0]] * 6  # loaded from disk, none compiled
