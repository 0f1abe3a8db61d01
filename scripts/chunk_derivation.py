"""How far is a chunk's cost from the sum of its layers' one-layer-per-stage costs?

A chunk (a contiguous group of layers on one stage, e.g. one of the ``D * v`` chunks of an
interleaved or V-shaped schedule) can be costed without profiling it: the SUM of its layers'
one-layer-per-stage costs at the same microbatch size. This script measures the error of that
derivation. Per model it builds, from the SAME layer objects and batch, the one-layer-per-stage
rigs and the rigs of every chunking (``--chunks``: numbers of contiguous chunks with balanced
layer counts, larger chunks first), and times all of them in ONE call of the profiler's engine
(:func:`umpipe_bench.profiler.engine.measure_cells`: interleaved rounds, every cell at a
rotating offset, medians), so machine drift lands on both sides alike. Passes per cell: stash
(fwd, bwd), recompute (rbwd), split stash (ibwd, wbwd; docs/MODEL.md §1c); no optimizer,
locality or split-recompute cells.

Derivation compared: ``kind(chunk, m) = sum over its layers of kind(layer, m)`` for fwd, bwd,
rbwd, ibwd, wbwd. The first chunk follows torch's first stage (its input needs no gradient): it
computes nothing in I and its W is its whole backward, so its derived ``ibwd`` is layer 0's and
its derived ``wbwd`` is ``wbwd(layer 0) + sum over its other layers of (ibwd + wbwd)``.
Relative error ``(derived - measured) / measured`` per chunk and size; the report gives per
model, chunking and kind the median (signed) and the largest absolute value.

Model, config, B, dtype and seed come from the committed one-layer-per-stage problem files, so
the sizes are theirs. Writes the Markdown report and a JSON file with every median.

    PYTHONPATH=. python scripts/chunk_derivation.py            # gpt1-14 and vgg16, D*v = 2, 4
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("fwd", "bwd", "rbwd", "ibwd", "wbwd")
DEFAULT_FILES = ("umpipe_bench/problems/data/gpt1-14.json", "umpipe_bench/problems/data/vgg16.json")


def balanced_counts(n_layers: int, chunks: int) -> list[int]:
    """``chunks`` contiguous layer counts summing to ``n_layers``, differing by at most one,
    larger ones first."""
    q, r = divmod(n_layers, chunks)
    return [q + 1] * r + [q] * (chunks - r)


def derived(one: dict[str, list[list[float]]], a: int, b: int, i: int, kind: str) -> float:
    """The derived cost of the chunk of layers ``[a, b)`` at size index ``i``."""
    if a == 0 and kind == "ibwd":
        return one["ibwd"][0][i]
    if a == 0 and kind == "wbwd":
        return one["wbwd"][0][i] + sum(one["ibwd"][s][i] + one["wbwd"][s][i]
                                       for s in range(1, b))
    return sum(one[kind][s][i] for s in range(a, b))


def measure(path: str, chunkings: list[int], repeats: int, warmup: int,
            threads: int) -> dict[str, Any]:
    """Time one-layer rigs and every chunking's rigs in one engine call; return medians."""
    import torch

    from umpipe_bench.problem import Problem
    from umpipe_bench.profiler.engine import measure_cells
    from umpipe_bench.profiler.profile import Grouping, Profiler
    from umpipe_bench.profiler.rig import prepare_rigs

    problem = Problem.load(ROOT / path)
    prov = problem.provenance
    prof = Profiler(str(prov["model"]), B=problem.B, grouping=Grouping(),
                    config=prov["config"], device="cpu", threads=threads, repeats=repeats,
                    warmup=warmup, optimizer=str(prov.get("optimizer", "adam")),
                    dtype=str(prov.get("dtype", "float32")), seed=int(prov.get("seed", 0)),
                    clock="wall", link=None, link_backend="gloo", progress=False, log=None,
                    co_run=False, locality=False)
    previous = torch.get_num_threads()
    torch.set_num_threads(threads)
    try:
        prof.load()
        n = len(prof.layers)
        groupings = [[1] * n] + [balanced_counts(n, d) for d in chunkings]
        rigs, spans = [], []
        for lps in groupings:
            rs = prepare_rigs(prof.layers, lps, prof.inputs, prof.targets,
                              optimizer=prof.optimizer, seed=prof.seed)
            spans.append((len(rigs), len(rigs) + len(rs)))
            rigs += rs
        started = time.perf_counter()
        load_start = os.getloadavg()
        meas = measure_cells(rigs, problem.sizes, prof.spec.loss, prof.timer, repeats=repeats,
                             warmup=warmup, recompute=True, opt=False, split=True,
                             split_recompute=False)
        seconds = time.perf_counter() - started
    finally:
        torch.set_num_threads(previous)
    out: dict[str, Any] = {
        "file": path, "model": prov["model"], "B": problem.B, "sizes": list(problem.sizes),
        "n_layers": n, "seconds": round(seconds, 1),
        "loadavg_start": [round(x, 2) for x in load_start],
        "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        "groupings": [],
    }
    for lps, (lo, hi) in zip(groupings, spans):
        out["groupings"].append({
            "layers_per_stage": lps,
            **{k: [[c.median for c in getattr(meas, k)[s]] for s in range(lo, hi)]
               for k in KINDS},
        })
    return out


def errors(data: dict[str, Any]) -> list[dict[str, Any]]:
    """Per chunking and kind: relative errors of the derived chunk costs, summarised."""
    one = data["groupings"][0]
    rows = []
    for g in data["groupings"][1:]:
        lps = g["layers_per_stage"]
        bounds, a = [], 0
        for k in lps:
            bounds.append((a, a + k))
            a += k
        for kind in KINDS:
            rel = []
            for c, (a, b) in enumerate(bounds):
                if kind == "ibwd" and a == 0:
                    continue  # bookkeeping only (no input gradient): reported apart
                for i in range(len(data["sizes"])):
                    meas = g[kind][c][i]
                    rel.append((derived(one, a, b, i, kind) - meas) / meas)
            rows.append({"chunks": len(lps), "layers_per_stage": lps, "kind": kind,
                         "median": statistics.median(rel), "max_abs": max(map(abs, rel)),
                         "n": len(rel)})
    return rows


def first_chunk_input_pass(data: dict[str, Any]) -> str:
    """The first chunks' measured ibwd (no input gradient: bookkeeping only), in ms."""
    one = data["groupings"][0]
    parts = [f"one layer {max(one['ibwd'][0]) * 1e3:.2f}"]
    for g in data["groupings"][1:]:
        parts.append(f"{len(g['layers_per_stage'])} chunks {max(g['ibwd'][0]) * 1e3:.2f}")
    return ", ".join(parts)


def report(all_data: list[dict[str, Any]], command: str) -> str:
    lines = [
        "# Chunk costs derived from one-layer-per-stage costs",
        "",
        f"Regenerate: `{command}`",
        "",
        "A chunk's cost derived as the SUM of its layers' one-layer-per-stage costs at the "
        "same microbatch size, against the chunk profiled directly. Both sides were timed in "
        "one run of the profiler's engine (interleaved rounds, medians); the one-layer and "
        "chunk rigs share layer objects and batch. Relative error = (derived - measured) / "
        "measured over every chunk and size of the grid; median (signed) and largest |error|. "
        "First chunk (its input needs no gradient, as torch's first stage): its ibwd is "
        "bookkeeping only, left out of the ibwd rows and given apart in ms; its derived wbwd "
        "= wbwd(layer 0) + sum over its other layers of (ibwd + wbwd). Link costs are not "
        "part of this comparison.",
        "",
    ]
    for data in all_data:
        lines += [
            f"## {data['model']} (from {data['file']}): {data['n_layers']} layers, "
            f"B = {data['B']}, sizes {data['sizes']}",
            "",
            f"Run: {data['seconds']} s, load average at start {data['loadavg_start']}, at end "
            f"{data['loadavg_end']}. First chunk's ibwd, largest over the sizes (ms): "
            f"{first_chunk_input_pass(data)}.",
            "",
            "| chunks | layers per chunk | kind | median rel. error | max abs rel. error | "
            "cells |",
            "|---:|---|---|---:|---:|---:|",
        ]
        for r in errors(data):
            lines.append(
                f"| {r['chunks']} | {','.join(map(str, r['layers_per_stage']))} | {r['kind']} "
                f"| {r['median']:+.1%} | {r['max_abs']:.1%} | {r['n']} |")
        lines.append("")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--files", nargs="+", default=list(DEFAULT_FILES),
                    help="one-layer-per-stage problem files (model, config, B from them)")
    ap.add_argument("--chunks", nargs="+", type=int, default=[2, 4],
                    help="numbers of contiguous chunks (D * v)")
    ap.add_argument("--repeats", type=int, default=3, help="measured rounds (medians)")
    ap.add_argument("--warmup", type=int, default=1, help="discarded warm-up rounds")
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--out", default="results/real/chunk-derivation.md")
    ap.add_argument("--json", default="results/real/chunk-derivation.json",
                    help="every median of the run")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT))
    from umpipe_bench.problem import atomic_write_text

    command = "PYTHONPATH=. python scripts/chunk_derivation.py" + "".join(
        f" {a}" for a in (argv if argv is not None else sys.argv[1:]))
    all_data = []
    for path in args.files:
        print(f"measuring {path}: one layer per stage and {args.chunks} chunks", file=sys.stderr)
        all_data.append(measure(path, args.chunks, args.repeats, args.warmup, args.threads))
        print(f"  {all_data[-1]['seconds']} s", file=sys.stderr)
    text = report(all_data, command)
    atomic_write_text(ROOT / args.out, text + "\n")
    atomic_write_text(ROOT / args.json, json.dumps(
        {"command": command, "repeats": args.repeats, "warmup": args.warmup,
         "threads": args.threads, "models": all_data}, indent=1) + "\n")
    print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
