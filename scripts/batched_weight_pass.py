"""Time one weight-gradient pass ``W`` over several ``I`` microbatches three ways, interleaved
in rounds on one thread: per microbatch (one ``autograd.grad`` walk each), batched (one kernel
call per cut over all the samples, :func:`umpipe_bench.runtime.split_backward.weight_grad_many`)
and as one microbatch of all the samples (what the profile's ``wbwd`` measures).

    python scripts/batched_weight_pass.py vgg16-stem --layers 4 7 --sizes 3 3 3 3 4 \
        --rounds 15 --out results/real/batched-weight-pass.md

Prints (and with ``--out`` writes) the median of each way and the ratios.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time

import torch
from torch import nn

from umpipe_bench.files import write_text
from umpipe_bench.problems.models import get_model
from umpipe_bench.runtime.split_backward import input_grad, weight_grad, weight_grad_many


def _works(chunk: nn.Module, x: torch.Tensor, gy: torch.Tensor, sizes: list[int]) -> list:
    params = [p for p in chunk.parameters() if p.requires_grad]
    out, a = [], 0
    for m in sizes:
        xb = x[a:a + m].detach().requires_grad_(True)
        _, w = input_grad(chunk(xb), xb, gy[a:a + m], params)
        out.append(w)
        a += m
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("model", help="model name (umpipe-bench models)")
    p.add_argument("--layers", type=int, nargs=2, required=True, metavar=("START", "STOP"),
                   help="the chunk: layers [START, STOP) of the model (START > 0)")
    p.add_argument("--sizes", type=int, nargs="+", required=True,
                   help="the I microbatch sizes the W covers")
    p.add_argument("--rounds", type=int, default=15, help="rounds (default: 15)")
    p.add_argument("--out", default=None, help="write the table to this Markdown file")
    args = p.parse_args(argv)
    a0, a1 = args.layers
    if not 0 < a0 < a1:
        print("batched_weight_pass: --layers must give 0 < START < STOP", file=sys.stderr)
        return 2
    torch.set_num_threads(1)
    spec = get_model(args.model)
    layers = spec.build(None, torch.float32, 0)
    if a1 > len(layers):
        print(f"batched_weight_pass: --layers: {args.model} has {len(layers)} layers",
              file=sys.stderr)
        return 2
    B = sum(args.sizes)
    x, _ = spec.sample_batch(B, None, 0, torch.float32)
    with torch.no_grad():
        for layer in layers[:a0]:
            x = layer(x)
    chunk = nn.Sequential(*layers[a0:a1])
    with torch.no_grad():
        gy = torch.randn_like(chunk(x))
    def each(works: list) -> None:
        for w in works:
            weight_grad(w)

    ways = {"per microbatch": each, "batched": weight_grad_many, "one microbatch": each}
    times: dict[str, list[float]] = {k: [] for k in ways}
    for r in range(args.rounds + 2):
        for k, fn in ways.items():
            ws = _works(chunk, x, gy, [B] if k == "one microbatch" else args.sizes)
            chunk.zero_grad(set_to_none=True)
            t = time.perf_counter()
            fn(ws)
            dt = time.perf_counter() - t
            if r >= 2:  # two warm-up rounds
                times[k].append(dt)
    med = {k: statistics.median(v) * 1e3 for k, v in times.items()}
    rows = ["# One W over several I microbatches, timed\n",
            f"`python scripts/batched_weight_pass.py {args.model} --layers {a0} {a1} --sizes "
            f"{' '.join(map(str, args.sizes))} --rounds {args.rounds}` (torch "
            f"{torch.__version__}, 1 thread, float32; medians of {args.rounds} interleaved "
            "rounds after 2 warm-up)\n",
            f"Chunk: layers [{a0}, {a1}) of `{args.model}`; the W covers I microbatches "
            f"{args.sizes} ({B} samples).\n",
            "| way | median (ms) | / one microbatch of all samples |", "|---|---:|---:|"]
    for k in ways:
        rows.append(f"| {k} | {med[k]:.2f} | {med[k] / med['one microbatch']:.3f} |")
    text = "\n".join(rows) + "\n"
    print(text)
    if args.out:
        write_text(args.out, text, "--out")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
