#!/usr/bin/env python
"""Does a backward cost less when it directly follows its own forward? (issue 14, part 4)

1F1B runs ``F(j) B(j')`` close together, GPipe runs every forward of a stage before its first
backward; the profiler times a backward right after its forward (docs/MODEL.md §1, as 1F1B
does). This times one stage of a profiled problem in one process, one thread, in two orders
per round, alternately:

* ``near``: ``F(1) B(1) F(2) B(2) ... F(M) B(M)``: each backward right after its forward;
* ``far``: ``F(1) ... F(M) B(1) ... B(M)``: the GPipe order, ``M - 1`` forwards in between;

on EDP(M) microbatches of the problem's mini-batch with random output gradients, and reports
the median over rounds of the per-round ratio far/near of the summed backward (and forward)
times, with a bootstrap 95 % interval (umpipe_bench/runtime/stats.py). A ratio above 1 means
the GPipe order's backwards run slower than the profile (and 1F1B) assume.

    OMP_NUM_THREADS=1 python scripts/backward_locality.py gpt1-mini-s2 --stage 0 --M 4
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from umpipe_bench.plan import balanced_split  # noqa: E402
from umpipe_bench.registry import get_problem  # noqa: E402
from umpipe_bench.runtime.stages import build_stages  # noqa: E402
from umpipe_bench.runtime.stats import bootstrap_median, paired_ratios  # noqa: E402


def stage_inputs(problem_name: str, stage: int) -> tuple[torch.nn.Module, torch.Tensor]:
    from problems.models import get_model

    p = get_problem(problem_name)
    prov = p.provenance
    mods = build_stages(prov["model"], prov["config"], prov["layers_per_stage"], torch.float32,
                        int(prov.get("seed", 0)))
    x, _ = get_model(prov["model"]).sample_batch(p.B, prov["config"], 0, torch.float32)
    with torch.no_grad():
        for m in mods[:stage]:
            x = m(x)
    return mods[stage], x


def one_round(mod: torch.nn.Module, chunks: list[torch.Tensor], grads: list[torch.Tensor],
              order: str) -> tuple[float, float]:
    """Summed forward and backward seconds of one iteration in ``order``."""
    fwd = bwd = 0.0
    outs: list[torch.Tensor] = []

    def f(x: torch.Tensor) -> torch.Tensor:
        nonlocal fwd
        x = x.detach().requires_grad_(x.is_floating_point())
        t = time.perf_counter()
        y = mod(x)
        fwd += time.perf_counter() - t
        return y

    def b(y: torch.Tensor, g: torch.Tensor) -> None:
        nonlocal bwd
        t = time.perf_counter()
        torch.autograd.backward(y, g)
        bwd += time.perf_counter() - t

    if order == "near":
        for x, g in zip(chunks, grads, strict=True):
            b(f(x), g)
    else:
        outs = [f(x) for x in chunks]
        for y, g in zip(outs, grads, strict=True):
            b(y, g)
    for prm in mod.parameters():
        prm.grad = None
    return fwd, bwd


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
    mod, x = stage_inputs(args.problem, args.stage)
    mod.train()
    chunks = list(torch.split(x, balanced_split(x.shape[0], args.M)))
    with torch.no_grad():
        shapes = [mod(c).shape for c in chunks]
    gen = torch.Generator().manual_seed(0)
    grads = [torch.randn(s, generator=gen) for s in shapes]
    for _ in range(2):  # warm-up
        one_round(mod, chunks, grads, "near")
        one_round(mod, chunks, grads, "far")
    res: dict[str, list[float]] = {"near_f": [], "near_b": [], "far_f": [], "far_b": []}
    for r in range(args.rounds):
        for order in (("near", "far") if r % 2 == 0 else ("far", "near")):
            fw, bw = one_round(mod, chunks, grads, order)
            res[f"{order}_f"].append(fw)
            res[f"{order}_b"].append(bw)
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
