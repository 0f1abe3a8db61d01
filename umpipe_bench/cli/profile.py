"""``umpipe-bench profile``: measure a torch model stage by stage into a problem file.

See :mod:`umpipe_bench.profiler` for what is measured and how (docs/MODEL.md §1).
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from ..errors import UserInputError
from ..runtime.allocator import add_malloc_option
from ._numbers import MAX_JOBS, whole
from ._paths import path_arg

__all__ = ["register", "run"]


def _config_item(text: str) -> tuple[str, Any]:
    if "=" not in text:
        raise argparse.ArgumentTypeError(f"expected KEY=VALUE, got {text!r}")
    key, raw = text.split("=", 1)
    try:
        value = json.loads(raw)
    except json.JSONDecodeError:
        value = raw
    return key.strip(), value


def register(sub: argparse._SubParsersAction) -> None:
    """Add the ``profile`` sub-command."""
    p = sub.add_parser(
        "profile",
        help="measure a torch model layer by layer into a problem file (docs/MODEL.md §1)",
        description="Profile MODEL (see umpipe_bench/problems/models: gpt1, gpt1-mini, vgg16, "
        "vgg16-mini, tiny-known, ...) at mini-batch B: per stage forward, backward, "
        "recompute+backward and optimizer step on the sizes 1, 2, 4, ..., B (warm-up, then "
        "interleaved round-robin rounds; medians and max/min noise), memory figures, boundary "
        "bytes, and a link calibrated by a gloo ping-pong between two local processes. Stages: one "
        "layer each (default), --layers-per-stage, or --stages S balanced by measured time. "
        "--split-backward also measures the split backward of zero-bubble schedules (docs/MODEL.md "
        "§1c); --split-backward-into FILE adds only those tables to an existing profiled problem "
        "file.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("model", metavar="MODEL", nargs="?", help="model name")
    p.add_argument("--batch", "-B", type=whole(1), help="mini-batch size B (required with MODEL)")
    grp = p.add_mutually_exclusive_group()
    grp.add_argument("--stages", type=whole(1), help="S stages balanced by measured layer time")
    grp.add_argument(
        "--layers-per-stage", metavar="K,K,...", help="explicit grouping, e.g. 4,3,3,4"
    )
    p.add_argument(
        "--balance-from", type=path_arg,
        metavar="FILE",
        help="with --stages: take layer times from this one-layer-per-stage profile (same "
        "model, config and B) instead of a probe",
    )
    p.add_argument("--device", help="torch device: cpu or cuda[:N] (default: cpu; with "
                   "--split-backward-into: the file's)")
    p.add_argument("--threads", type=whole(1, MAX_JOBS),
                   help="torch intra-op threads (default: 1; with "
                   "--split-backward-into: the file's)")
    p.add_argument("--seq", type=whole(1), help="config override: sequence length (gpt1 models)")
    p.add_argument("--image", type=whole(1), help="config override: image side (vgg16 models)")
    p.add_argument(
        "--set",
        dest="config",
        action="append",
        type=_config_item,
        default=[],
        metavar="KEY=VALUE",
        help="other config override (VALUE parsed as JSON), repeatable",
    )
    p.add_argument("--repeats", type=whole(1), default=5, help="measured rounds (median of N)")
    p.add_argument("--warmup", type=whole(0), default=1, help="discarded warm-up rounds")
    p.add_argument("--optimizer", choices=("adam", "sgd"), default="adam", help="timed step")
    p.add_argument("--dtype", choices=("float32", "float64", "bfloat16"), default="float32",
                   help="parameter and activation dtype the stages are timed in")
    p.add_argument("--seed", default=0, metavar="SEED",
                   help="weights, batch and gradients seed, an integer in 0..4294967295")
    p.add_argument(
        "--clock",
        choices=("wall", "thread-cpu"),
        default="wall",
        help="CPU timer: wall time, or CPU seconds of the one compute thread (diagnostic on a "
        "shared machine; needs --threads 1)",
    )
    p.add_argument(
        "--co-run",
        action="store_true",
        help="time the rounds while another process trains the same model on another core: "
        "the load a neighbouring stage puts on a CPU machine's shared memory system (use it "
        "for problems executed with one process per core, as the -mini-s2 ones are)",
    )
    p.add_argument(
        "--link-latency", type=float, help="seconds; with --link-bandwidth skips calibration"
    )
    p.add_argument("--link-bandwidth", type=float, help="bytes/s; with --link-latency")
    p.add_argument(
        "--link-backend", choices=("gloo", "nccl"), default="gloo", help="calibration backend"
    )
    p.add_argument("--name", help="problem name (default: the --out file stem)")
    p.add_argument("--out", type=path_arg, metavar="FILE",
                   help="problem JSON file to write (required with "
                   "MODEL)")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    add_malloc_option(p, "C allocator settings while profiling, as timed runs use them")
    p.add_argument(
        "--no-locality", action="store_true",
        help="do not measure the backward locality factors bwd_far (docs/MODEL.md §1b); "
        "the problem then charges every stash backward its near cost",
    )
    p.add_argument(
        "--split-backward", action="store_true",
        help="also measure the split backward (ibwd: input-gradient pass I, ribwd: recompute "
        "forward + I, wbwd: weight-gradient pass W, and memory.w_held_bytes_per_sample; "
        "docs/MODEL.md §1c) in the same rounds; off by default: it roughly doubles the time "
        "of the rounds",
    )
    p.add_argument(
        "--split-backward-into", type=path_arg, metavar="FILE",
        help="instead of a new profile: measure the split backward of the profiled problem "
        "FILE (model, config, grouping, B, dtype, seed, threads from its provenance; "
        "--threads, --repeats, --warmup, --device apply when given) and write the tables into "
        "FILE (atomically), every other number unchanged; the run's own fwd/bwd medians go to "
        "provenance.split_backward for a drift check. Takes no MODEL and no --out",
    )
    p.set_defaults(func=run)


def _split_into(args: argparse.Namespace) -> int:
    """``--split-backward-into FILE``: measure, write FILE atomically, print the ratios."""
    from pathlib import Path

    from ..profiler.profile import split_backward_into
    from ._paths import check_output_file, writing

    given = [name for name, bad in (("MODEL", args.model is not None),
                                    ("--out", args.out is not None),
                                    ("--batch", args.batch is not None),
                                    ("--stages", args.stages is not None),
                                    ("--layers-per-stage", args.layers_per_stage is not None),
                                    ("--split-backward", args.split_backward)) if bad]
    if given:
        raise UserInputError(f"--split-backward-into takes its model and grouping from the "
                             f"file; drop {', '.join(given)}")
    path = Path(args.split_backward_into)
    if not path.is_file():
        raise UserInputError(f"--split-backward-into {str(path)!r}: no such file")
    check_output_file(path, "--split-backward-into")
    problem = split_backward_into(
        path, repeats=args.repeats, warmup=args.warmup,
        threads=args.threads, device=args.device, progress=not args.no_progress,
        log=lambda msg: print(msg, file=sys.stderr))
    with writing(path, "--split-backward-into"):
        problem.save(path)
    run_bwd = problem.provenance["split_backward"]["run_bwd"]
    print(f"wrote {path}: split backward of {problem.S} stages, sizes {list(problem.sizes)}, "
          f"{problem.provenance['split_backward']['seconds']} s")
    print("ratios at size B against this run's own bwd (run B); drift = run B / the file's bwd")
    print(f"{'stage':>5}  {'I/B':>6}  {'W/B':>6}  {'(I+W)/B':>7}  {'drift':>6}  "
          f"{'w_held/saved':>12}  name")
    for s, st in enumerate(problem.stages):
        b = run_bwd[s][-1]
        held = st.memory.w_held_bytes_per_sample if st.memory is not None else None
        saved = st.memory.saved_act_bytes_per_sample if st.memory is not None else None
        frac = f"{held / saved:.2f}" if held is not None and saved else "-"
        print(f"{s:>5}  {st.ibwd[-1] / b:>6.3f}  {st.wbwd[-1] / b:>6.3f}  "
              f"{(st.ibwd[-1] + st.wbwd[-1]) / b:>7.3f}  {b / st.bwd[-1]:>6.3f}  "
              f"{frac:>12}  {st.name}")
    return 0


def run(args: argparse.Namespace) -> int:
    """Profile, save atomically, print a one-line summary per stage; 0 on success."""
    from pathlib import Path

    if args.split_backward_into is not None:
        return _split_into(args)
    if args.model is None or args.batch is None or args.out is None:
        missing = [n for n, v in (("MODEL", args.model), ("--batch", args.batch),
                                  ("--out", args.out)) if v is None]
        raise UserInputError(f"profile needs {', '.join(missing)} (or --split-backward-into "
                             "FILE)")
    from ..profiler.partition import parse_layers_per_stage
    from ..profiler.profile import Grouping, LinkFigures, profile_model
    from ..schema import parse_seed
    from ._paths import check_output_file, writing

    args.seed = parse_seed(args.seed, "--seed")
    check_output_file(args.out, "--out")  # before minutes of profiling, not after
    if args.batch < 1:
        raise UserInputError(f"--batch must be >= 1, got {args.batch}")
    if (args.link_latency is None) != (args.link_bandwidth is None):
        raise UserInputError("give both --link-latency and --link-bandwidth, or neither")
    if args.balance_from and args.stages is None:
        raise UserInputError("--balance-from needs --stages")
    config: dict[str, Any] = dict(args.config)
    if args.seq is not None:
        config["seq"] = args.seq
    if args.image is not None:
        config["image"] = args.image
    lps = parse_layers_per_stage(args.layers_per_stage) if args.layers_per_stage else None
    link = None
    if args.link_latency is not None:
        link = LinkFigures(args.link_latency, args.link_bandwidth)
    out = Path(args.out)
    from ..runtime.allocator import apply_in_process, spawn_allocator

    malloc = apply_in_process(args.malloc)  # this process times; the co-runner inherits it
    with spawn_allocator(malloc):
        problem = profile_model(
            args.model,
            B=args.batch,
            grouping=Grouping(layers_per_stage=lps, stages=args.stages,
                              balance_from=args.balance_from),
            config=config,
            device=args.device or "cpu",
            threads=1 if args.threads is None else args.threads,
            repeats=args.repeats,
            warmup=args.warmup,
            optimizer=args.optimizer,
            dtype=args.dtype,
            seed=args.seed,
            clock=args.clock,
            link=link,
            link_backend=args.link_backend,
            name=args.name or out.stem,
            progress=not args.no_progress,
            log=lambda msg: print(msg, file=sys.stderr),
            co_run=args.co_run,
            locality=not args.no_locality,
            split_backward=args.split_backward,
        )
    problem.provenance["malloc"] = malloc
    with writing(out, "--out"):
        problem.save(out)
    prov = problem.provenance
    print(
        f"wrote {out}: {problem.name}, S={problem.S}, B={problem.B}, sizes {list(problem.sizes)}, "
        f"{prov['profile_seconds']} s, noise median {prov['noise_median']} max {prov['noise_max']}"
    )
    print(
        f"{'stage':>5}  {'layers':>7}  {'fwd(B) ms':>10}  {'bwd(B) ms':>10}  {'rbwd(B) ms':>10}  "
        f"{'opt ms':>8}  {'bwd_far':>7}  name"
    )
    for s, st in enumerate(problem.stages):
        a, b = st.extra["layers"]
        print(
            f"{s:>5}  {a:>3}-{b - 1:<3}  {st.fwd[-1] * 1e3:>10.3f}  {st.bwd[-1] * 1e3:>10.3f}  "
            f"{st.rbwd[-1] * 1e3:>10.3f}  {st.opt * 1e3:>8.3f}  "
            f"{'-' if st.bwd_far is None else f'{st.bwd_far:.3f}':>7}  {st.name}"
        )
    lk = prov["link"]
    print(
        f"link: latency {lk['latency_s'] * 1e6:.1f} us, "
        f"bandwidth {lk['bandwidth_Bps'] / 1e9:.3f} GB/s ({lk['method'].split(',')[0]})"
    )
    return 0
