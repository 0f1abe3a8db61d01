#!/usr/bin/env python
"""The C allocator settings' effect on measured schedule times (docs/EXECUTE.md "Allocator").

``run``: launches of ``scripts/measure_torch_schedules.py`` on one entries file, alternating
``--malloc glibc`` and ``--malloc steady`` (pair ``n`` runs glibc first when ``n`` is odd),
writing ``OUT/glibcN.json`` and ``OUT/steadyN.json``. ``page``: per folder, how the two modes
compare: the iteration time, the spread of single rounds, and how well launches agree.

    python scripts/allocator_ab.py run ENTRIES --pairs 4 --rounds 24 --out DIR
    python scripts/allocator_ab.py page DIR... --out results/real/allocator.md
"""

from __future__ import annotations

import argparse
import itertools
import json
import shlex
import subprocess
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umpipe_bench.problem import atomic_write_text  # noqa: E402
from umpipe_bench.runtime.stats import spearman  # noqa: E402

MODES = ("glibc", "steady")


def _run(a: argparse.Namespace, argv: list[str]) -> int:
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    atomic_write_text(out / "command.txt", shlex.join(["python", "scripts/allocator_ab.py",
                                                       *argv]) + "\n")
    for n in range(1, a.pairs + 1):
        for mode in (MODES if n % 2 else MODES[::-1]):
            target = out / f"{mode}{n}.json"
            if target.exists():
                print(f"error: --out: {target} exists (a new folder, or remove it)",
                      file=sys.stderr)
                return 2
            cmd = [sys.executable, str(ROOT / "scripts" / "measure_torch_schedules.py"),
                   a.entries, "--rounds", str(a.rounds), "--warmup", str(a.warmup),
                   "--malloc", mode, "--out", str(target), "--report", str(out / f"{mode}{n}.md")]
            print(f"pair {n}/{a.pairs}, {mode}", file=sys.stderr, flush=True)
            rc = subprocess.run(cmd, cwd=ROOT, stdout=subprocess.DEVNULL).returncode
            if rc != 0:
                print(f"error: {shlex.join(cmd)} exited {rc}", file=sys.stderr)
                return 2 if rc == 2 else 1
    return 0


def _load(folder: Path) -> tuple[dict[str, list[dict[str, np.ndarray]]], dict | None]:
    """Per mode, each launch's times by entry (ms); and the first glibc launch's file."""
    runs: dict[str, list[dict[str, np.ndarray]]] = {m: [] for m in MODES}
    first = None
    for mode in MODES:
        for f in sorted(folder.glob(f"{mode}[0-9]*.json"),
                        key=lambda p: int(p.stem[len(mode):])):
            data = json.loads(f.read_text(encoding="utf-8"))
            if data.get("malloc") != mode:
                raise SystemExit(f"error: {f}: recorded malloc {data.get('malloc')!r}, "
                                 f"expected {mode!r}")
            first = first or data
            runs[mode].append({e["label"]: np.asarray(e["times"]) * 1e3
                               for e in data["result"]["entries"]})
    return runs, first


def _section(folder: Path) -> list[str]:
    runs, first = _load(folder)
    if first is None or not all(runs.values()):
        raise SystemExit(f"error: {folder}: no launches of both modes")
    labels = sorted(set.intersection(*(set(r) for rs in runs.values() for r in rs)))
    made = folder / "command.txt"
    command = (made.read_text(encoding="utf-8").strip() if made.exists() else
               "(not recorded)")
    rows, med = [], {}
    for mode in MODES:
        rs = runs[mode]
        per_entry = {lab: [float(np.median(r[lab])) for r in rs] for lab in labels}
        med[mode] = {lab: float(np.median(v)) for lab, v in per_entry.items()}
        spread = [np.quantile(r[lab], 0.9) / np.quantile(r[lab], 0.1) for r in rs
                  for lab in labels]
        moves = [max(v) / min(v) for v in per_entry.values()]
        agree = [spearman([a[lab] for lab in labels], [b[lab] for lab in labels])
                 for a, b in itertools.combinations(
                     [{lab: float(np.median(r[lab])) for lab in labels} for r in rs], 2)]
        rows.append(
            f"| {mode} | {len(rs)} | {np.median(list(med[mode].values())):.1f} | "
            f"{np.median(spread):.2f} (max {np.max(spread):.2f}) | "
            f"{np.median(moves):.3f} (max {np.max(moves):.3f}) | "
            + (f"{np.mean(agree):.2f} ({np.min(agree):.2f}-{np.max(agree):.2f})"
               if agree else "-") + " |")
    ratio = [med["steady"][lab] / med["glibc"][lab] for lab in labels]
    w = first["workload"]
    return [
        f"## {w['name']}", "",
        f"`{command}`: {len(labels)} entries, {first['rounds']} rounds after "
        f"{first['warmup']} warm-up per launch, launches alternating by mode.", "",
        "| mode | launches | median of the entries' times (ms) | round spread: 90th / 10th "
        "percentile, median over entries and launches | an entry's median, slowest / fastest "
        "launch, median over entries | launch against launch, Spearman over the entries |",
        "|---|---:|---:|---|---|---|",
        *rows, "",
        f"steady / glibc, an entry's time (median over its launches): median "
        f"{np.median(ratio):.3f}, range {min(ratio):.3f}-{max(ratio):.3f}.", ""]


def _page(a: argparse.Namespace) -> int:
    argv = ["python", "scripts/allocator_ab.py", "page", *a.folders, "--out", a.out]
    lines = ["# The C allocator settings and measured schedule times", "",
             f"Regenerate: `{shlex.join(argv)}`. Each section gives the command of its "
             "launches (the entries file is a sitting's, `scripts/torch_schedules_sitting.sh`). "
             "Every launch runs "
             "every entry of torch's schedules in interleaved rounds, two processes (gloo, one "
             "thread each); `glibc`: glibc's malloc defaults, `steady`: the settings of "
             "docs/EXECUTE.md \"Allocator\".", ""]
    for folder in a.folders:
        lines += _section(Path(folder))
    atomic_write_text(a.out, "\n".join(lines))
    print(f"wrote {a.out}")
    return 0


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="alternating launches of both modes")
    r.add_argument("entries", help="an entries file of measure_torch_schedules.py")
    r.add_argument("--pairs", type=int, default=4, help="launches per mode")
    r.add_argument("--rounds", type=int, default=24)
    r.add_argument("--warmup", type=int, default=3)
    r.add_argument("--out", required=True, help="a folder for the launches' files")
    p = sub.add_parser("page", help="the comparison page")
    p.add_argument("folders", nargs="+", help="folders of `run`")
    p.add_argument("--out", required=True)
    a = ap.parse_args(argv)
    if a.cmd == "run":
        if a.pairs < 1 or a.rounds < 1 or a.warmup < 0:
            ap.error("--pairs and --rounds must be >= 1, --warmup >= 0")
        return _run(a, argv)
    return _page(a)


if __name__ == "__main__":
    sys.exit(main())
