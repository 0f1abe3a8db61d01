"""The pure core (problems, plans, schedules, simulator, planners, baselines,
registries, CLI parsing) imports no torch; only the profiler and the runtime do."""

from __future__ import annotations

import subprocess
import sys

PURE = [
    "umpipe_bench", "umpipe_bench.problem", "umpipe_bench.plan", "umpipe_bench.schedules",
    "umpipe_bench.simulator", "umpipe_bench.synthetic", "umpipe_bench.registry",
    "umpipe_bench.trace", "umpipe_bench.planners", "umpipe_bench.planners.algorithms.dgap",
    "umpipe_bench.planners.algorithms.tidgap", "umpipe_bench.planners.evaluation.evaluator",
    "umpipe_bench.cli", "umpipe_bench.layout", "umpipe_bench.devsim",
    "umpipe_bench.torch_schedules", "umpipe_bench.torch_schedules.best", "umpipe_bench.problems",
    "umpipe_bench.baselines.edp", "umpipe_bench.baselines.greedy", "umpipe_bench.baselines.exact",
    "umpipe_bench.baselines.random_search", "umpipe_bench.chunkplan",
    "umpipe_bench.chunk_schedule", "umpipe_bench.chunk_torch", "umpipe_bench.chunk_codec",
    "umpipe_bench.planners.evaluation.chunk_eval",
    "umpipe_bench.planners.evaluation.chunk_objective",
    "umpipe_bench.planners.algorithms.chunk_search", "umpipe_bench.certify.model",
    "umpipe_bench.certify.solve", "umpipe_bench.certify.relax", "umpipe_bench.certify.caps",
]


def test_pure_modules_and_cli_help_import_no_torch():
    code = (
        "import sys, importlib\n"
        f"for m in {PURE!r}: importlib.import_module(m)\n"
        "from umpipe_bench.cli import build_parser\n"
        "build_parser()\n"
        "from umpipe_bench.registry import get_problem, planner_names\n"
        "get_problem('sim-s4-b16-s0'); planner_names()\n"
        "bad = sorted(m for m in sys.modules if m == 'torch' or m.startswith('torch.'))\n"
        "print(len(bad))\n"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "0", "torch was imported by the pure core"
