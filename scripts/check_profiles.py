#!/usr/bin/env python
"""Does a profile predict reality?

For each committed problem (default: the two ``-mini-s2`` ones), rebuild the model from the
file's provenance and time, in one process, one whole mini-batch of B samples as M microbatches
(EDP(M): balanced sizes, larger first, docs/MODEL.md §2): every microbatch goes forward through all
layers (+ loss / B) and backward, one after the other. That direct time is compared with the
profile's prediction for the same work, the sum over stages and microbatches of
``fwd[s](m) + bwd[s](m)`` (sizes off the grid are read by interpolation, docs/MODEL.md §1):

* from the committed file, and
* from a fresh profile taken in this same run, between two halves of the direct measurements,
  so that machine drift hits both alike (this separates profile error from drift since the
  file was captured).

Communication and the optimizer step are not in either side. Error = predicted / direct - 1.

``--clock thread-cpu`` times both sides in CPU seconds of the one compute thread instead of
wall seconds (the fresh profile too; the committed file stays wall time, so its column is then
only indicative). On a machine shared with other jobs, wall times swing 2-3x with their load;
CPU time does not, which shows how much of the wall-clock error is the profile's own.

    python scripts/check_profiles.py                     # gpt1-mini-s2 vgg16-mini-s2
    python scripts/check_profiles.py --clock thread-cpu
    python scripts/check_profiles.py vgg16-mini-s2 --repeats 7 --splits 1,2,4,8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

import torch  # noqa: E402

from umpipe_bench.plan import balanced_split  # noqa: E402
from umpipe_bench.problem import Problem  # noqa: E402
from umpipe_bench.problems.models import get_model  # noqa: E402
from umpipe_bench.profiler.profile import Grouping, LinkFigures, profile_model  # noqa: E402

DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


def edp_sizes(B: int, M: int) -> list[int]:
    """Balanced split of B into M sizes, larger first (as torch.tensor_split)."""
    return list(balanced_split(B, M))


def predict(problem: Problem, sizes: list[int]) -> float:
    """Sum over stages and microbatches of fwd + bwd (stash mode), docs/MODEL.md §1."""
    return sum(problem.fwd(s, m) + problem.bwd(s, m) for s in range(problem.S) for m in sizes)


def direct_once(
    layers: list[Any], loss_fn: Any, x: Any, y: Any, sizes: list[int], now: Any = time.perf_counter
) -> float:
    """One mini-batch as microbatches of ``sizes``, forward+backward each, single process."""
    B = x.shape[0]
    t0 = now()
    start = 0
    for m in sizes:
        h = x[start : start + m]
        for layer in layers:
            h = layer(h)
        (loss_fn(h, y[start : start + m]) / B).backward()
        start += m
    return now() - t0


def check(
    name: str, splits: list[int], repeats: int, fresh_repeats: int, clock: str
) -> list[dict[str, Any]]:
    path = ROOT / "umpipe_bench" / "problems" / "data" / f"{name}.json"
    problem = Problem.load(path)
    prov = problem.provenance
    spec = get_model(prov["model"])
    dtype = DTYPES[prov.get("dtype", "float32")]
    seed = int(prov.get("seed", 0))
    torch.set_num_threads(int(prov.get("threads", 1)))
    B = problem.B
    layers = spec.build(prov["config"], dtype, seed)
    x, y = spec.sample_batch(B, prov["config"], seed, dtype)
    splits = [M for M in splits if M <= B]
    now = time.thread_time if clock == "thread-cpu" else time.perf_counter

    samples: dict[int, list[float]] = {M: [] for M in splits}

    def direct_rounds(n: int, offset: int) -> None:
        for r in range(n):  # round-robin over M, rotating start
            k = (r + offset) % len(splits)
            for M in splits[k:] + splits[:k]:
                samples[M].append(direct_once(layers, spec.loss, x, y, edp_sizes(B, M), now))

    for M in splits:  # warm-up
        direct_once(layers, spec.loss, x, y, edp_sizes(B, M))
    first = repeats // 2
    direct_rounds(first, 0)
    t0 = time.perf_counter()
    fresh = profile_model(
        prov["model"],
        B=B,
        grouping=Grouping(layers_per_stage=tuple(prov["layers_per_stage"])),
        config=prov["config"],
        threads=int(prov.get("threads", 1)),
        repeats=fresh_repeats,
        warmup=1,
        optimizer=prov.get("optimizer", "adam"),
        dtype=prov.get("dtype", "float32"),
        seed=seed,
        clock=clock,
        link=LinkFigures(0.0, 1e12),
        progress=False,
    )
    fresh_s = time.perf_counter() - t0
    direct_rounds(repeats - first, first)
    rows = []
    for M in splits:
        sizes = edp_sizes(B, M)
        d = statistics.median(samples[M])
        rows.append(
            {
                "problem": name,
                "M": M,
                "sizes": sizes,
                "direct_s": d,
                "direct_noise": max(samples[M]) / min(samples[M]),
                "file_s": predict(problem, sizes),
                "fresh_s": predict(fresh, sizes),
                "fresh_profile_s": fresh_s,
            }
        )
    return rows


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("problems", nargs="*", default=["gpt1-mini-s2", "vgg16-mini-s2"])
    ap.add_argument("--splits", default="1,2,3,4,8,32", help="microbatch counts M (EDP)")
    ap.add_argument(
        "--repeats", type=int, default=6, help="direct rounds (half before, half after)"
    )
    ap.add_argument("--fresh-repeats", type=int, default=5, help="rounds of the fresh profile")
    ap.add_argument(
        "--clock", choices=("wall", "thread-cpu"), default="wall", help="timer for both sides"
    )
    args = ap.parse_args(argv)
    splits = [int(v) for v in args.splits.split(",")]
    rows = []
    for name in args.problems:
        print(f"checking {name} ...", file=sys.stderr, flush=True)
        rows += check(name, splits, args.repeats, args.fresh_repeats, args.clock)
    print(f"clock: {args.clock}")
    hdr = (
        f"{'problem':<15} {'M':>3} {'sizes':<16} {'direct ms':>10} {'noise':>6} "
        f"{'file ms':>9} {'err':>7} {'fresh ms':>9} {'err':>7}"
    )
    print(hdr)
    print("-" * len(hdr))
    for r in rows:
        sizes = r["sizes"]
        label = f"{len(sizes)}x{sizes[0]}" if len(set(sizes)) == 1 else ",".join(map(str, sizes))
        print(
            f"{r['problem']:<15} {r['M']:>3} {label[:16]:<16} {r['direct_s'] * 1e3:>10.1f} "
            f"{r['direct_noise']:>6.2f} {r['file_s'] * 1e3:>9.1f} "
            f"{r['file_s'] / r['direct_s'] - 1:>+7.1%} {r['fresh_s'] * 1e3:>9.1f} "
            f"{r['fresh_s'] / r['direct_s'] - 1:>+7.1%}"
        )
    worst = max(abs(r["fresh_s"] / r["direct_s"] - 1) for r in rows)
    print(f"worst |error| of the same-run profile: {worst:.1%}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
