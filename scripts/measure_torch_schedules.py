#!/usr/bin/env python
"""Measure torch.distributed.pipelining's schedules on one workload: the measured side of
predicted-vs-measured schedule times (docs/MODEL.md §5).

Input: a JSON file, as a predictor writes it::

    {"workload": "gpt1-mini-b16",            # a name in WORKLOADS, a profiled problem (name
                                             # or .json file: model, config and B from its
                                             # provenance), or {"model", "config", "B"
                                             # [, "layers", "name"]}
     "entries": [{"schedule": "zbv", "torch_class": "ScheduleZBVZeroBubble", "M": 4,
                  "partition": [3, 4, 4, 3], "v": 2, "T_pred": 0.123}, ...]}

``partition`` gives the layer count of each of the ``C = D * v`` chunks (contiguous layer
groups, chunk 0 first); which rank holds which chunk is the schedule's (runtime/
torch_schedules.py). Every entry is checked against torch's rules before anything starts.

An entry ``{"chunk_plan": FILE[, "label"]}`` is a chunk plan (``umpipe-bench plan --devices 2
--out FILE``) on the workload's per-layer problem (``workload`` must name a profiled problem):
the same launch runs it through the runtime's own executor, in the same rounds, on the same
parameters, batch, threads and optimizer as torch's schedules, with the device simulator's T
as ``T_pred`` (``--check-grads`` checks it too).

One launch of ``D = 2`` processes (gloo, ``torchrun`` through the runtime's launcher: a
deadline, and no process of the run survives it or this script) holds every entry's stages,
runs ``--warmup`` rounds, then ``--rounds`` rounds, each round one iteration of every entry
in a rotating order (round k starts at entry k mod E). An iteration is timed from a barrier
to the end of the slowest rank's step and optimizer update (wall clock).

Output: ``--out`` (JSON: the raw per-iteration times of every entry and rank, and the summary),
``--report`` (markdown, the command first): per entry the median, a percentile-bootstrap 95 %
interval of the median (runtime/stats.py), ``T_pred`` and ``|pred - meas| / meas``; over the
entries with a prediction, Spearman's rank correlation of predicted vs measured medians and
the median relative error. Progress lines go to stderr.

    python scripts/measure_torch_schedules.py entries.json --rounds 30 --warmup 3
    python scripts/measure_torch_schedules.py --example gpt1-mini-b16 > entries.json
    python scripts/measure_torch_schedules.py --profile-command gpt1-mini-b16
"""

from __future__ import annotations

import argparse
import datetime as _dt
import json
import shlex
import socket
import sys
import tempfile
import threading
import uuid
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umpipe_bench.errors import UmpipeError  # noqa: E402
from umpipe_bench.problem import atomic_write_text  # noqa: E402
from umpipe_bench.runtime.allocator import add_malloc_option  # noqa: E402
from umpipe_bench.runtime.errors import PlanRefused, StageFailure  # noqa: E402
from umpipe_bench.runtime.launcher import launch  # noqa: E402
from umpipe_bench.runtime.lifetime import Terminated, terminate_raises  # noqa: E402
from umpipe_bench.runtime.torch_entries import (  # noqa: E402
    D,
    calibration_entries,
    chunk_entries,
    example_entries,
    fit_overhead,
    predicted_entries,
    profile_command,
    resolve_workload,
)
from umpipe_bench.runtime.torch_report import combine, gain, report, summarize  # noqa: E402
from umpipe_bench.runtime.torch_schedules import (  # noqa: E402
    WORKLOADS,
    TorchMultiSpec,
    make_entry,
)


class _Progress(threading.Thread):
    """Copy the ranks' progress lines from the run's log to stderr while it runs."""

    def __init__(self, log: Path) -> None:
        super().__init__(daemon=True)
        self.log, self.stop = log, threading.Event()

    def run(self) -> None:
        pos = 0
        while not self.stop.wait(0.5):
            try:
                with open(self.log, encoding="utf-8", errors="replace") as fh:
                    fh.seek(pos)
                    text = fh.read()
            except OSError:
                continue
            cut = text.rfind("\n") + 1
            pos += len(text[:cut].encode("utf-8"))
            for line in text[:cut].splitlines():
                if "[torch-multi]" in line:
                    print(line[line.index("[torch-multi]"):], file=sys.stderr, flush=True)




def _load() -> str:
    try:
        return " ".join(Path("/proc/loadavg").read_text().split()[:3])
    except OSError:
        return "n/a"


def _message_cpu(text: str | None) -> tuple[float, float] | None:
    """``--message-cpu A,B`` -> (A, B); one clear error otherwise."""
    if text is None:
        return None
    try:
        a, b = (float(x) for x in text.split(","))
    except ValueError:
        raise PlanRefused(f"--message-cpu must be A,B: seconds per message and seconds per "
                          f"byte, two numbers >= 0, got {text!r}") from None
    if not (0 <= a < float("inf") and 0 <= b < float("inf")):
        raise PlanRefused(f"--message-cpu must be A,B: seconds per message and seconds per "
                          f"byte, two numbers >= 0, got {text!r}")
    return a, b


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("entries", nargs="?", help="entries JSON (workload + entries)")
    ap.add_argument("--workload", help="override the file's workload (a WORKLOADS name)")
    ap.add_argument("--rounds", type=int, default=20, help="timed rounds")
    ap.add_argument("--warmup", type=int, default=3, help="discarded warm-up rounds")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--dtype", default="float32", help="parameters and activations")
    ap.add_argument("--optimizer", default="adam", help="none, sgd, adam or adamw (the "
                    "profiler's default is adam)")
    ap.add_argument("--seed", type=int, default=0, help="weights and batch seed")
    ap.add_argument("--timeout", type=float, default=300.0,
                    help="seconds a rank waits on its peer before the run fails")
    ap.add_argument("--deadline", type=float, default=3600.0, help="seconds for the whole run")
    add_malloc_option(ap)
    ap.add_argument("--out", default="results/real/torch-schedules.json",
                    help="JSON: raw per-iteration times and the summary")
    ap.add_argument("--report", default="results/real/torch-schedules.md",
                    help="markdown report")
    ap.add_argument("--run-dir", help="the launch's folder (default: a temporary one)")
    ap.add_argument("--check-grads", action="store_true",
                    help="instead of timing: one float64 iteration of every entry (no "
                    "optimizer step), each parameter gradient compared with the "
                    "single-process full-batch gradient; exit 1 on a mismatch")
    ap.add_argument("--example", metavar="WORKLOAD",
                    help="print an entries file for WORKLOAD (every schedule, M 4 and 8, even "
                    "partitions) and exit")
    ap.add_argument("--predict", metavar="PROBLEM",
                    help="print an entries file predicted from the one-layer-per-stage problem "
                    "PROBLEM (every schedule at its best v, M and partition on D = 2, with "
                    "T_pred) and exit")
    ap.add_argument("--op-overhead", type=float, default=0.0, metavar="SECONDS",
                    help="with --predict: seconds the runtime adds to every action (fit one "
                    "with --calibrate and --fit-overhead)")
    ap.add_argument("--message-cpu", metavar="A,B",
                    help="with --predict: CPU seconds a cross-device message costs each end, "
                    "A + B * bytes (default: off, or the charge a runtime-calibrated problem of "
                    "scripts/runtime_calibration.py carries)")
    ap.add_argument("--calibrate", metavar="PROBLEM",
                    help="print calibration entries for PROBLEM's workload (GPipe at every M "
                    "dividing B, balanced partition) and exit")
    ap.add_argument("--fit-overhead", nargs=2, metavar=("PROBLEM", "RUN_JSON"),
                    help="print the per-action overhead that best fits a measured run of the "
                    "calibration entries, and exit")
    ap.add_argument("--mode", default="stash", choices=("stash", "recompute"),
                    help="memory mode of --predict (the runtime keeps activations: stash)")
    ap.add_argument("--merge", nargs="+", metavar="ENTRIES",
                    help="print one entries file holding every entry of the given files (one "
                    "workload; an entry in several kept once, as first met) and exit")
    ap.add_argument("--combine", nargs="+", metavar="RUN_JSON",
                    help="write one report (--report) and a scatter (--png) over the --out files "
                    "of several measured workloads, and exit")
    ap.add_argument("--png", help="with --combine: the predicted-vs-measured scatter")
    ap.add_argument("--gain", nargs="+", metavar="RUN_JSON",
                    help="write one report (--report) over launches (--out files) that ran "
                    "chunk plans beside torch's schedules: each plan against the fastest torch "
                    "schedule as measured, and exit")
    ap.add_argument("--intro", help="with --gain: a markdown file put after the title")
    ap.add_argument("--profile-command", metavar="WORKLOAD",
                    help="print the command writing WORKLOAD's one-layer-per-stage problem")
    args = ap.parse_args(argv)
    try:
        if args.example:
            print(json.dumps(example_entries(args.example), indent=1))
            return 0
        cmd = "python scripts/measure_torch_schedules.py " + " ".join(
            map(shlex.quote, argv if argv is not None else sys.argv[1:]))
        if args.combine:
            return combine(args.combine, args.report, args.png, cmd)
        if args.merge:
            print(json.dumps(merge_entries(args.merge), indent=1))
            return 0
        if args.gain:
            return gain(args.gain, args.report, cmd, args.intro)
        if args.predict:
            msg = _message_cpu(args.message_cpu)
            print(json.dumps(predicted_entries(args.predict, args.mode, args.op_overhead, msg),
                             indent=1))
            return 0
        if args.calibrate:
            print(json.dumps(calibration_entries(args.calibrate), indent=1))
            return 0
        if args.fit_overhead:
            print(f"{fit_overhead(*args.fit_overhead):.6f}")
            return 0
        if args.profile_command:
            if args.profile_command not in WORKLOADS:
                raise PlanRefused(f"unknown workload {args.profile_command!r}; known: "
                                  f"{', '.join(WORKLOADS)}")
            print(profile_command(args.profile_command))
            return 0
        if not args.entries:
            ap.error("give an entries JSON file (or --example / --profile-command)")
        if args.check_grads:
            return check_grads(args)
        return measure(args, argv if argv is not None else sys.argv[1:])
    except (UmpipeError, StageFailure) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except Terminated as exc:
        print(f"measure_torch_schedules: {exc}", file=sys.stderr)
        return 128 + exc.signum


def merge_entries(paths: list[str]) -> dict[str, Any]:
    """One entries file over ``paths`` (workloads of one model, config and B; the first file's
    names the result's): every distinct (torch class, M, partition) once, as first met."""

    def _same(w: Any) -> tuple[str, str, int]:
        r = resolve_workload(w)
        return r["model"], json.dumps(r["config"], sort_keys=True), r["B"]

    out: dict[str, Any] = {}
    seen = set()
    for path in paths:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
        if not out:
            out = {"workload": data.get("workload"), "entries": []}
        elif _same(data.get("workload")) != _same(out["workload"]):
            raise PlanRefused(f"{path}: field 'workload' {data.get('workload')!r} is not the "
                              f"model, config and B of {out['workload']!r} ({paths[0]})")
        for e in data.get("entries") or []:
            key = (e["torch_class"], e["M"], tuple(e["partition"]))
            if key not in seen:
                seen.add(key)
                out["entries"].append(e)
    return out


def load_spec(args: argparse.Namespace, **settings: Any) -> tuple[dict[str, Any],
                                                                   TorchMultiSpec]:
    """The workload and a checked spec of every entry of ``args.entries``."""
    data = json.loads(Path(args.entries).read_text(encoding="utf-8"))
    workload = args.workload or data.get("workload")
    w = resolve_workload(workload)
    every = data.get("entries") or []
    if not every:
        raise PlanRefused(f"{args.entries}: no entries")
    chunks = chunk_entries(workload, [it for it in every if "chunk_plan" in it])
    items = [it for it in every if "chunk_plan" not in it]
    n_layers = (w["layers"] if w["layers"] is not None else
                sum(items[0].get("partition", [])) if items else None)
    entries = [make_entry(it, D=D, B=w["B"], n_layers=n_layers, index=i)
               for i, it in enumerate(items)]
    base = {"dtype": args.dtype, "seed": args.seed, "rounds": args.rounds,
            "warmup": args.warmup, "optimizer": args.optimizer, "timeout_s": args.timeout,
            "threads": args.threads}
    base.update(settings)
    return w, TorchMultiSpec(run_id=uuid.uuid4().hex, model=w["model"], config=w["config"],
                             B=w["B"], D=D, entries=entries, chunks=chunks, **base)


def check_grads(args: argparse.Namespace) -> int:
    """One float64 iteration of every entry; gradients vs the full-batch reference."""
    import torch

    from umpipe_bench.runtime.reference import reference_gradients

    w, spec = load_spec(args, dtype="float64", rounds=1, warmup=0, optimizer="none",
                        dump_grads=True)
    with tempfile.TemporaryDirectory(prefix="umpipe-torch-grads-") as tmp:
        run_dir = Path(args.run_dir or tmp)
        with terminate_raises():
            launch(spec, run_dir, deadline_s=args.deadline, stage_args=["--torch-multi"],
                   malloc=args.malloc)
        every = [*spec.entries, *spec.chunks]
        n = sum(map(len, spec.chunks[0].layers)) if spec.chunks else sum(
            spec.entries[0].partition)  # every entry covers the model (checked)
        loss, per_layer = reference_gradients(w["model"], w["config"], [1] * n, w["B"],
                                              seed=args.seed)
        ref = {f"{i}.{k[2:]}": g for i, d in enumerate(per_layer) for k, g in d.items()}
        bad = 0
        for k, e in enumerate(every):
            got: dict[str, Any] = {}
            for r in range(D):
                got.update(torch.load(run_dir / f"grads-e{k}-r{r}.pt",
                                      weights_only=True)["grads"])
            worst, missing = 0.0, sorted(set(ref) - {x for x, g in got.items() if g is not None})
            for name, g in ref.items():
                if got.get(name) is not None:
                    scale = float(g.abs().max()) or 1.0
                    worst = max(worst, float((got[name] - g).abs().max()) / scale)
            ok = not missing and worst <= 1e-9
            bad += not ok
            print(f"{e.label:<40} {'ok ' if ok else 'BAD'} max |error| / max |grad| "
                  f"{worst:.2e}" + (f", no gradient for {missing[:3]}" if missing else ""))
    print(f"{len(every) - bad} of {len(every)} entries give the full-batch "
          f"gradient (float64, reference loss {loss:.6f})")
    return 1 if bad else 0


def measure(args: argparse.Namespace, argv: list[str]) -> int:
    """Check the entries, launch, summarize, write ``--out`` and ``--report``."""
    w, spec = load_spec(args)
    entries = [*spec.entries, *spec.chunks]
    command = "python scripts/measure_torch_schedules.py " + " ".join(map(shlex.quote, argv))
    print(f"{len(entries)} entries on {w['name']}: {args.warmup} warm-up + {args.rounds} "
          "rounds", file=sys.stderr, flush=True)
    load_before = _load()
    with tempfile.TemporaryDirectory(prefix="umpipe-torch-") as tmp:
        run_dir = Path(args.run_dir or tmp)
        run_dir.mkdir(parents=True, exist_ok=True)
        progress = _Progress(run_dir / "torchrun.log")
        progress.start()
        try:
            with terminate_raises():
                result = launch(spec, run_dir, deadline_s=args.deadline,
                                stage_args=["--torch-multi"],
                                extra_env={"UMPIPE_PROGRESS": "1"}, malloc=args.malloc)
        finally:
            progress.stop.set()
    summary = summarize(result)
    meta = {"workload": w, "threads": args.threads, "dtype": args.dtype,
            "optimizer": args.optimizer, "rounds": args.rounds, "warmup": args.warmup,
            "host": socket.gethostname(), "torch": result["torch"],
            "date": _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "load_before": load_before, "load_after": _load(),
            "launch_s": round(result["launch_s"], 1),
            "malloc": result["malloc"],
            "peak_rss_mib": result.get("peak_rss_mib", [])}
    atomic_write_text(args.out, json.dumps({"command": command, **meta, "summary": summary,
                                            "result": result}, indent=1) + "\n")
    atomic_write_text(args.report, report(command, meta, summary))
    for r in sorted(summary["rows"], key=lambda r: r["median"]):
        pred = "" if r["T_pred"] is None else f"  pred {r['T_pred'] * 1e3:.1f} ms"
        print(f"{r['label']:<40} {r['median'] * 1e3:8.1f} ms [{r['low'] * 1e3:.1f}, "
              f"{r['high'] * 1e3:.1f}]{pred}")
    if "spearman" in summary:
        print(f"spearman {summary['spearman']:.3f}, median |pred-meas|/meas "
              f"{summary['median_rel_error'] * 100:.1f} %")
    print(f"wrote {args.out} and {args.report} ({meta['launch_s']} s)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
