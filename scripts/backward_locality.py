#!/usr/bin/env python
"""Does a backward cost less when it directly follows its own forward?

1F1B runs ``F(j) B(j')`` close together, GPipe runs every forward of a stage before its first
backward; the profiler times a backward right after its forward (docs/MODEL.md §1, as 1F1B
does). This times one stage of a profiled problem in one process, one thread, in two orders
per round, alternately (the profiler's own locality cell, umpipe_bench/profiler/locality.py,
which ``umpipe-bench profile`` runs inside its rounds to measure ``bwd_far``, docs/MODEL.md §1b):

* ``near``: ``F(1) B(1) F(2) B(2) ... F(M) B(M)``: each backward right after its forward;
* ``far``: ``F(1) ... F(M) B(1) ... B(M)``: the GPipe order, ``M - 1`` forwards in between;

on EDP(M) microbatches of the problem's mini-batch, with the profiler's seeded output
gradients (the last stage: its loss), and reports the median over rounds of the per-round ratio
far/near of the summed backward (and forward) times, with a bootstrap 95 % interval
(umpipe_bench/runtime/stats.py). A ratio above 1 means the GPipe order's backwards run slower
than the profile (and 1F1B) assume.

    OMP_NUM_THREADS=1 python scripts/backward_locality.py gpt1-mini-s2 --stage 0 --M 4
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from umpipe_bench.plan import balanced_split  # noqa: E402
from umpipe_bench.profiler.engine import StageRig, make_clock, prepare_rigs  # noqa: E402
from umpipe_bench.profiler.locality import locality_round  # noqa: E402
from umpipe_bench.registry import get_problem  # noqa: E402
from umpipe_bench.runtime.stats import bootstrap_median, paired_ratios  # noqa: E402


def stage_rig(problem_name: str, stage: int) -> tuple[StageRig, object, int]:
    """The profiler's rig of one stage of a profiled problem, its loss and B."""
    from umpipe_bench.problems.models import get_model

    p = get_problem(problem_name)
    prov = p.provenance
    spec = get_model(prov["model"])
    seed = int(prov.get("seed", 0))
    layers = spec.build(dict(prov["config"]), torch.float32, seed)
    x, y = spec.sample_batch(p.B, dict(prov["config"]), seed, torch.float32)
    rigs = prepare_rigs(layers, prov["layers_per_stage"], x, y, optimizer="sgd", seed=seed)
    return rigs[stage], spec.loss, p.B


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("problem")
    ap.add_argument("--stage", type=int, default=0)
    ap.add_argument("--M", type=int, default=4)
    ap.add_argument("--rounds", type=int, default=30)
    ap.add_argument("--json", default=None, help="also write the result here")
    args = ap.parse_args()
    torch.set_num_threads(1)
    rig, loss, B = stage_rig(args.problem, args.stage)
    rig.module.train()
    sizes = balanced_split(B, args.M)
    clock = make_clock(torch.device("cpu"))
    for r in range(2):  # warm-up
        locality_round(rig, sizes, loss, clock, r)
    rounds = [locality_round(rig, sizes, loss, clock, r) for r in range(args.rounds)]
    res = {"near_f": [x.near_fwd for x in rounds], "near_b": [x.near_bwd for x in rounds],
           "far_f": [x.far_fwd for x in rounds], "far_b": [x.far_bwd for x in rounds]}
    b_iv = bootstrap_median(paired_ratios(res["far_b"], res["near_b"]))
    f_iv = bootstrap_median(paired_ratios(res["far_f"], res["near_f"]))
    out = {"problem": args.problem, "stage": args.stage, "M": args.M, "rounds": args.rounds,
           "backward_far_over_near": b_iv.__dict__, "forward_far_over_near": f_iv.__dict__,
           "near_b_ms": sorted(res["near_b"])[args.rounds // 2] * 1e3,
           "far_b_ms": sorted(res["far_b"])[args.rounds // 2] * 1e3}
    print(f"{args.problem} stage {args.stage}, EDP({args.M}) microbatches, {args.rounds} rounds: "
          f"backward far/near {b_iv}; forward far/near {f_iv}")
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=1) + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
