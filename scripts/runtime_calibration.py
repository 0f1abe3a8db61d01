#!/usr/bin/env python
"""A runtime calibration of torch's schedules: per-layer action costs measured inside
torch.distributed.pipelining, and the CPU charge of a message, written as a problem file the
device simulator and ``scripts/measure_torch_schedules.py --predict`` read
(docs/TORCH-SCHEDULES.md §7, umpipe_bench/runtime/calibration.py).

Three steps, each its own command:

    python scripts/runtime_calibration.py entries PROBLEM > CAL.json
    python scripts/runtime_calibration.py run CAL.json --rounds 8 --out DIR
    python scripts/runtime_calibration.py fit CAL.json --ops DIR --exchange EXCHANGE.json \\
        --out PROBLEM-runtime.json

``entries``: the designed calibration entries of PROBLEM's layer count (GPipe on every
two-chunk partition, ZB1P on every ``[k, 1, 1, L - k - 2]``, M = 2 and 4; ``--probes``: also
every other schedule on balanced partitions): fixed by the layer count and batch, not by a
prediction (a probe may be the configuration a prediction picks, measured in a run of its own),
and none of the schedule runs being predicted is read. ``run``: two processes
(gloo, one thread each) run every entry round by round in a rotating order, the garbage
collector handled as the timing runtime does, every ``PipelineStage`` action timed
(``scripts/torch_schedule_ops.py``'s instrumentation; two warm-up rounds dropped); output
``DIR/ops.r{rank}.json``. ``fit``: the per-layer decomposition of those action times and the
message charge fitted to ``EXCHANGE.json`` (``scripts/torch_schedule_ops.py exchange``;
several files: their rows pooled), into the problem file; it prints the fit's residuals.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from umpipe_bench.errors import UmpipeError  # noqa: E402
from umpipe_bench.runtime.allocator import (  # noqa: E402
    UNRECORDED,
    add_malloc_option,
    record_allocator,
    recorded_allocator,
    spawn_allocator,
)


def _entries(problem_path: str, probes: bool = False) -> dict:
    from umpipe_bench.registry import get_problem
    from umpipe_bench.runtime.calibration import design

    P = get_problem(problem_path)
    return {"workload": problem_path, "entries": design(P.S, P.B, probes=probes)}


def _fit(cal_file: str, ops_dir: str, exchange: list[str], out: str) -> str:
    import numpy as np

    from umpipe_bench.problem import atomic_write_text
    from umpipe_bench.registry import get_problem
    from umpipe_bench.runtime.calibration import (
        _row,
        calibrated_problem,
        decompose,
        message_charge,
        observations,
    )

    spec = json.loads(Path(cal_file).read_text(encoding="utf-8"))
    P = get_problem(spec["workload"])
    ranks = []
    for k in (0, 1):
        f = Path(ops_dir, f"ops.r{k}.json")
        if not f.exists():
            raise UmpipeError(f"--ops {ops_dir}: no {f.name} (run `runtime_calibration.py run` "
                              "first)")
        ranks.append(json.loads(f.read_text(encoding="utf-8")))
    obs = observations(spec["entries"], P.B, ranks)
    if not obs:
        raise UmpipeError(f"--ops {ops_dir}: no timed action of the entries of {cal_file}")
    costs = decompose(obs, P.S)
    rows = [r for f in exchange for r in json.loads(Path(f).read_text(encoding="utf-8"))]
    a, b = message_charge(rows)
    meta = {"entries": cal_file, "ops": ops_dir, "exchange": exchange,
            "malloc": {"actions": recorded_allocator(ops_dir),
                       "exchange": sorted({r.get("malloc", UNRECORDED) for r in rows})},
            "observations": len(obs),
            "how": "per size: non-negative least squares of in-runtime chunk action medians on "
                   "per-layer F, B, I, W costs (umpipe_bench.runtime.calibration)"}
    Q = calibrated_problem(P, costs, (a, b), meta)
    atomic_write_text(out, json.dumps(Q.to_dict(), indent=1) + "\n")
    lines = [f"{len(obs)} observations of {len(spec['entries'])} entries; message charge "
             f"{a * 1e3:.3f} ms + {b * 1e9:.3f} ms/MB per message end"]
    for m, c in sorted(costs.items()):
        sub = [o for o in obs if o.m == m]
        x = np.concatenate([c[k] for k in ("F", "B", "I", "W")])
        x = np.nan_to_num(x)
        fit = np.array([_row(o, P.S) @ x for o in sub])
        y = np.array([o.seconds for o in sub])
        big = y > 1e-4
        rel = np.abs(fit[big] - y[big]) / y[big]
        prof = [sum(getattr(P.stages[i], {"F": "fwd", "B": "bwd", "I": "ibwd",
                                          "W": "wbwd"}[k])[list(P.sizes).index(m)]
                    for i in range(P.S)) for k in ("F", "B", "I", "W")]
        ratio = ", ".join(f"{k} {np.nansum(c[k]) / p:.2f}" for k, p in
                          zip(("F", "B", "I", "W"), prof) if p > 0)
        lines.append(f"size {m}: {len(sub)} observations, median |fit - obs| / obs "
                     f"{np.median(rel) * 100:.1f} % (max {rel.max() * 100:.1f} %); whole model "
                     f"calibrated / profiled: {ratio}")
    lines.append(f"wrote {out}")
    return "\n".join(lines)


def _compare(earlier: str, later: str) -> str:
    """Per kind: the later calibration's costs over the earlier's, summed over layers and
    calibrated sizes, and per layer and size (10th, 50th and 90th percentiles of the pairs where
    both costs are at least 0.2 ms)."""
    import numpy as np

    from umpipe_bench.problem import Problem

    a, b = Problem.load(earlier), Problem.load(later)
    if a.S != b.S or list(a.sizes) != list(b.sizes):
        raise UmpipeError(f"{later}: {b.S} layers, sizes {list(b.sizes)}; expected those of "
                          f"{earlier} ({a.S} layers, sizes {list(a.sizes)})")
    cal = [set((p.provenance or {}).get("runtime_calibration", {}).get("calibrated_sizes", ()))
           for p in (a, b)]
    sizes = sorted(cal[0] & cal[1])
    if not sizes:
        raise UmpipeError(f"{earlier} and {later}: no microbatch size calibrated in both")
    cols = [list(a.sizes).index(m) for m in sizes]
    lines = [f"later / earlier, calibrated sizes {sizes}: whole kind; per layer and size "
             "p10 / p50 / p90 (both >= 0.2 ms)"]
    for kind in ("fwd", "bwd", "ibwd", "wbwd"):
        if any(getattr(st, kind) is None for st in (*a.stages, *b.stages)):
            continue  # a problem without split-backward tables
        x = np.array([[getattr(st, kind)[j] for j in cols] for st in a.stages])
        y = np.array([[getattr(st, kind)[j] for j in cols] for st in b.stages])
        both = (x >= 2e-4) & (y >= 2e-4)
        p10, p50, p90 = np.percentile(y[both] / x[both], [10, 50, 90])
        lines.append(f"{kind:5} {y.sum() / x.sum():.2f}; {p10:.2f} / {p50:.2f} / {p90:.2f}")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    e = sub.add_parser("entries", help="print the calibration entries of a problem")
    e.add_argument("problem")
    e.add_argument("--probes", action="store_true", help="also every other schedule on "
                   "balanced partitions (runtime/calibration.py, schedule_probes)")
    r = sub.add_parser("run", help="time every action of the calibration entries in torch")
    r.add_argument("entries")
    r.add_argument("--rounds", type=int, default=8)
    r.add_argument("--out", required=True)
    add_malloc_option(r)
    f = sub.add_parser("fit", help="decompose the timed actions into the calibrated problem")
    f.add_argument("entries")
    f.add_argument("--ops", required=True, help="the folder of `run`")
    f.add_argument("--exchange", required=True, nargs="+", help="exchange.json file(s) of "
                   "`scripts/torch_schedule_ops.py exchange` (several: their rows pooled)")
    f.add_argument("--out", required=True, help="the calibrated problem file")
    c = sub.add_parser("compare", help="how two calibrations of one workload differ")
    c.add_argument("earlier", help="a calibrated problem file (`fit --out`)")
    c.add_argument("later", help="another calibrated problem file of the same workload")
    a = ap.parse_args(argv)
    try:
        if a.cmd == "entries":
            print(json.dumps(_entries(a.problem, a.probes), indent=1))
        elif a.cmd == "run":
            if a.rounds < 1:
                print(f"error: --rounds must be an integer >= 1, got {a.rounds}",
                      file=sys.stderr)
                return 2
            import torch.multiprocessing as mp
            from torch_schedule_ops import _free_port, _run_rank

            Path(a.out).mkdir(parents=True, exist_ok=True)
            with spawn_allocator(a.malloc) as mode:
                mp.spawn(_run_rank, args=(_free_port(), a.entries, a.rounds, a.out, True),
                         nprocs=2)
            record_allocator(a.out, mode)
        elif a.cmd == "compare":
            print(_compare(a.earlier, a.later))
        else:
            print(_fit(a.entries, a.ops, a.exchange, a.out))
    except (UmpipeError, OSError, json.JSONDecodeError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
