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
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DEFAULT_FILES = ("umpipe_bench/problems/data/gpt1-14.json", "umpipe_bench/problems/data/vgg16.json")


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
    from umpipe_bench.profiler.chunk_derivation import measure, report

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
