"""How far a chunk's cost is from the sum of its layers' one-layer-per-stage costs
(docs/MODEL.md §1d; the rule itself is :func:`umpipe_bench.layout.group_layers`).

:func:`measure` builds, from the same layer objects and batch, the one-layer-per-stage rigs and
the rigs of every chunking (balanced contiguous layer counts, :func:`balanced_counts`) and times
all of them in one call of the profiler's engine (:func:`.engine.measure_cells`: interleaved
rounds, medians), so machine drift lands on both sides alike. :func:`derived` is the derivation
on those medians (the first chunk's ``ibwd`` is layer 0's, its ``wbwd`` takes its other layers'
``ibwd`` too, docs/MODEL.md §1c); :func:`errors` the relative errors per chunking and kind;
:func:`report` the page ``scripts/chunk_derivation.py`` writes.

Imports torch only inside :func:`measure`.
"""

from __future__ import annotations

import os
import statistics
import time
from pathlib import Path
from typing import Any

__all__ = ["KINDS", "balanced_counts", "derived", "errors", "first_chunk_input_pass", "measure",
           "report"]

#: the checkout a relative problem file is read from
ROOT = Path(__file__).resolve().parents[2]
#: the passes compared (the engine's cell tables)
KINDS = ("fwd", "bwd", "rbwd", "ibwd", "wbwd")


def balanced_counts(n_layers: int, chunks: int) -> list[int]:
    """``chunks`` contiguous layer counts summing to ``n_layers``, differing by at most one,
    larger ones first (a list, unchecked; :func:`umpipe_bench.layout.balanced_counts` is the
    checked tuple)."""
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

