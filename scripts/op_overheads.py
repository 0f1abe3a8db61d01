#!/usr/bin/env python
"""What each plan costs per op on the runtime, against the profile.

Reads the per-op timers that ``scripts/measure_real.py --op-times`` keeps
(``<run>/op-times/op-times-s<rank>.json``, umpipe_bench/runtime/executor.py ``OpTime``) and the
plan files and profile of that run, and reports per plan and stage, as medians over the
measured iterations of per-iteration sums:

* ``F meas/pred`` and ``B meas/pred``: the stage's own compute in its forward (backward) ops
  (op time minus receive waits, re-chunk takes and sends) over the profile's
  ``fwd[s](m)`` (``bwd``/``rbwd``) summed over the same ops (docs/MODEL.md §1);
* ``take ms``: assembling inputs and output gradients from several producer microbatches
  (re-chunking, docs/MODEL.md §5); ``send ms``: handing results to the link; ``msgs``: ops
  that sent.

It also writes, per plan, a Chrome trace with the measured iteration (the median one; process
0) beside the simulator's (process 1): ``<run>/traces/<plan>.json``.

    python scripts/op_overheads.py results/real/vgg16-hr-s2 > results/real/overheads.md
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umpipe_bench.plan import Plan  # noqa: E402
from umpipe_bench.problem import Problem  # noqa: E402
from umpipe_bench.runtime.op_costs import FIELDS, measured_trace, stage_rows  # noqa: E402
from umpipe_bench.simulator import simulate  # noqa: E402
from umpipe_bench.trace import chrome_trace  # noqa: E402


def load_ops(run: Path) -> dict[str, list[list[list[dict[str, Any]]]]]:
    """label -> stage -> iteration -> ops (dicts of FIELDS)."""
    out: dict[str, list[list[list[dict[str, Any]]]]] = {}
    files = sorted((run / "op-times").glob("op-times-s*.json"),
                   key=lambda p: int(p.stem.rsplit("s", 1)[1]))
    if not files:
        raise SystemExit(f"op_overheads: no op-times files under {run / 'op-times'} "
                         "(run scripts/measure_real.py with --op-times)")
    for f in files:
        data = json.loads(f.read_text())
        for label, iters in data["entries"].items():
            out.setdefault(label, []).append(
                [[dict(zip(FIELDS, op, strict=True)) for op in it] for it in iters])
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("run", help="a measure_real run folder: <out>/<problem>")
    ap.add_argument("--profile", default=None,
                    help="problem file the predictions use (default: <run>/profile.json)")
    args = ap.parse_args()
    run = Path(args.run)
    prof = Path(args.profile) if args.profile else run / "profile.json"
    if not prof.exists():
        raise SystemExit(f"op_overheads: no profile {prof} (pass --profile)")
    problem = Problem.load(prof)
    ops = load_ops(run)
    rows: list[dict[str, Any]] = []
    (run / "traces").mkdir(exist_ok=True)
    for label, stages in ops.items():
        pf = run / f"{label}.json"
        if not pf.exists():
            continue  # a torch.pipelining entry: no per-op timers of ours
        plan = Plan.load(pf)
        sched = str(plan.meta.get("schedule", "gpipe"))
        rows += stage_rows(problem, plan, stages, label)
        pred = chrome_trace(simulate(problem, plan, sched))
        pevents = [dict(e, pid=1) for e in pred["traceEvents"]]
        pevents.append({"ph": "M", "pid": 1, "name": "process_name",
                        "args": {"name": "predicted"}})
        (run / "traces" / f"{label}.json").write_text(json.dumps(
            {"traceEvents": measured_trace(stages) + pevents}) + "\n")
    print(f"Per-op costs of the plans in `{run}` (profile `{prof.name}`), medians over "
          "iterations; own compute excludes receive waits, re-chunk takes and sends.\n")
    print("| plan | stage | ops | msgs sent | F meas ms | F meas/pred | B meas ms | B meas/pred "
          "| take ms | send ms |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['plan']} | {r['stage']} | {r['ops']} | {r['msgs']} | {r['F_ms']:.1f} | "
              f"{r['F_ratio']:.3f} | {r['B_ms']:.1f} | {r['B_ratio']:.3f} | {r['take_ms']:.2f} | "
              f"{r['send_ms']:.2f} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
