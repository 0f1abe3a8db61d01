"""Time and evaluations TiDGAP's ``plan`` takes to come within 0.5 % and 0.1 % of the best known.

Two steps (docs/SEARCH.md, "Stopping"):

* ``run``: TiDGAP on every problem of the default bench matrix
  (``umpipe_bench/bench/default.toml``, the optional ones that exist) and
  ``sim-s64-b1024-s0``, both modes, the given seeds, under one budget (``default``: the
  planner's own stop rule, as ``plan`` without ``--budget``; or any ``--budget`` string).
  Every run appends one JSON line to ``--out``: its final T, evaluations, wall time (the
  planner's whole run, numba cache warm) and its best-so-far history (evaluations, seconds,
  T). With ``--plans DIR`` each run's plan is saved there (``best-known`` candidates);
* ``best-known``: offers every saved plan to the best-known file (each re-simulated first);
* ``table``: reads such files and writes the markdown table: per problem, mode and budget
  label, the median and worst over seeds of the wall time and evaluations to within 0.5 % and
  0.1 % of the best known (``umpipe_bench/problems/best_known.json``, capped family; a seed that
  never got there counts as not reached, shown as ``-``), the final gap, the run's wall and
  the machine's speed when the runs started (:func:`reference_speed`: a fixed evaluation,
  microseconds per plan; ``-`` for rows that did not record it);
* ``pairs``: two labels run on the same seeds (a screen): per problem and mode, and over all,
  the final T of ``--other`` against ``--base`` seed by seed, how many were faster and the
  median;
* ``best-of``: runs made side by side in pairs (seed ``k`` on one core beside seed
  ``k + offset`` on the other, started together): per problem and mode, the better run of each
  pair, what two independent searches on the two cores would give;
* ``at-evaluations``: labels whose runs made different numbers of evaluations (different
  machines, different cores): per problem and mode, each label's best T at the fewest
  evaluations any of the runs made (read from each run's history), as a gap to the best known,
  and its run lengths in evaluations;
* ``searches``: runs of searches side by side (the default budget's, TiDGAP setting
  ``searches``): per problem and mode, how often each search gave the plan, each search's
  final gap, the coarse phase's gap of a coarse search (setting ``coarse``), and search 0's
  evaluations against another label's runs of the same seeds (``--against``).

Wall times are only meaningful on an otherwise idle machine (2 cores here); evaluations do not
depend on the load.

    PYTHONPATH=$PWD python scripts/plan_speed.py run --label default --seeds 0-9 \\
        --out results/perf/plan-speed/default.jsonl
    PYTHONPATH=$PWD python scripts/plan_speed.py table results/perf/plan-speed/*.jsonl \\
        > results/perf/plan-speed.md
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from umpipe_bench.bench.best_known import BestKnown
from umpipe_bench.bench.config import builtin_config
from umpipe_bench.planners.algorithms.tidgap import TiDGAP
from umpipe_bench.registry import get_problem, problem_names

#: The problem the benchmark adds to the default matrix's.
LARGE = "sim-s64-b1024-s0"
TARGETS = (0.005, 0.001)


def default_problems() -> list[str]:
    """The default bench matrix's problems (the optional ones that exist), then :data:`LARGE`."""
    b = builtin_config("default").bench
    known = set(problem_names())
    out = [p for p in b.problems if p in known]
    return [*out, *[p for p in b.optional_problems if p in known and p not in out], LARGE]


def parse_seeds(text: str) -> list[int]:
    """``0-4``, ``0,3,5`` or a mix, as a list; anything else is a ValueError (argparse's
    ``type``: one line, exit 2)."""
    out: list[int] = []
    for part in text.split(","):
        a, _, b = part.partition("-")
        try:
            out.extend(range(int(a), int(b) + 1) if b else [int(a)])
        except ValueError:
            raise ValueError(f"seeds {text!r}: expected e.g. 0-9 or 0,3,5") from None
    return out


@lru_cache(maxsize=1)
def _ranks() -> dict[str, int]:
    """Each of :func:`default_problems` by its place (read once)."""
    return {p: i for i, p in enumerate(default_problems())}


def _order(key: tuple[str, ...]) -> tuple[int, tuple[str, ...]]:
    """Sort key of a ``(problem, mode, ...)`` group: the benchmark's problem order first."""
    return _ranks().get(key[0], 99), key


#: The machine's speed when a run starts: the family evaluator (one thread) on this fixed
#: population, microseconds per plan (the median of :data:`REFERENCE_CALLS` calls). Seconds
#: to a target scale with it: rows made on a machine with twice the figure took about twice
#: the time.
REFERENCE = {"S": 16, "B": 64, "P": 256, "seed": 0}
REFERENCE_CALLS = 5


def reference_speed() -> float:
    """Microseconds per plan of the reference evaluation (:data:`REFERENCE`)."""
    import numpy as np

    from umpipe_bench.planners.evaluation.encoding import random_bits
    from umpipe_bench.planners.evaluation.family import FamilyEvaluator
    from umpipe_bench.synthetic import synthetic_problem

    S, B, P = REFERENCE["S"], REFERENCE["B"], REFERENCE["P"]
    rng = np.random.default_rng(REFERENCE["seed"])
    fb = random_bits(rng, P, S, B)
    caps = rng.integers(1, B + 1, size=(P, S))
    ev = FamilyEvaluator(synthetic_problem(S=S, B=B, seed=REFERENCE["seed"]), "stash")
    ev(fb, None, caps)  # compile or load the cache
    times = []
    for _ in range(REFERENCE_CALLS):
        t0 = time.perf_counter()
        ev(fb, None, caps)
        times.append((time.perf_counter() - t0) / P)
    return round(1e6 * statistics.median(times), 2)


#: What every run line holds (``run`` writes more).
RUN_KEYS = ("label", "problem", "mode", "seed", "T", "evaluations", "history")


class RunFileError(ValueError):
    """A run file that cannot be read: one line naming the file (and line) and why (``main``
    prints it after the sub-command's name and exits 2)."""


def read_runs(files: list[str]) -> list[dict[str, Any]]:
    """Every run line of ``files`` (JSON lines as ``run`` writes them; blank lines skipped)."""
    rows: list[dict[str, Any]] = []
    for f in files:
        try:
            text = Path(f).read_text()
        except OSError as e:
            raise RunFileError(f"run file {f}: {e.strerror or e}") from None
        for n, line in enumerate(text.splitlines(), 1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise RunFileError(f"run file {f} line {n}: not JSON ({e.msg})") from None
            missing = [k for k in RUN_KEYS if not isinstance(row, dict) or k not in row]
            if missing:
                raise RunFileError(f"run file {f} line {n}: expected a run with "
                                   f"{', '.join(RUN_KEYS)}; missing {', '.join(missing)}")
            rows.append(row)
    return rows


def run(args: argparse.Namespace) -> int:
    problems = args.problems.split(",") if args.problems else default_problems()
    modes = args.modes.split(",")
    budget = None if args.budget in (None, "default") else args.budget
    sets = dict(a.split("=", 1) for a in args.set or [])
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    plans = Path(args.plans) if args.plans else None
    if plans is not None:
        plans.mkdir(parents=True, exist_ok=True)
    for name in problems:
        problem = get_problem(name)
        for mode in modes:
            for seed in parse_seeds(args.seeds):
                speed = reference_speed()
                t0 = time.perf_counter()
                r = TiDGAP(**sets).plan(problem, mode=mode, seed=seed, budget=budget)
                wall = time.perf_counter() - t0
                row: dict[str, Any] = {
                    "label": args.label, "problem": name, "mode": mode, "seed": seed,
                    "budget": args.budget or "default", "settings": sets,
                    "T": r.iteration_time, "evaluations": r.evaluations,
                    "wall": round(wall, 3), "reference_us": speed,
                    "schedule": r.schedule, "timed": not args.untimed,
                    "history": _improvements(r.history),
                }
                if "search_evaluations" in r.settings:  # searches side by side
                    row["search_T"] = r.settings["search_times"]
                    row["search_evaluations"] = r.settings["search_evaluations"]
                    row["search_coarse"] = r.settings.get("search_coarse")
                    row["search_coarse_T"] = r.settings.get("search_coarse_times")
                elif r.settings.get("coarse"):  # one search, started coarse
                    row["coarse_T"] = r.settings["coarse_time"]
                if plans is not None:
                    path = plans / f"{name}__{mode}__{args.label}__{seed}.json"
                    r.plan.save(path)
                    row["plan_file"] = str(path)
                with out.open("a") as fh:
                    fh.write(json.dumps(row) + "\n")
                print(f"{name} {mode} seed {seed}: T {r.iteration_time:.6g} "
                      f"evals {r.evaluations} wall {wall:.1f} s", file=sys.stderr, flush=True)
    return 0


def _improvements(history: Any) -> list[list[float]]:
    """The history's records where the best T improved, and its last one (the step curve)."""
    out: list[list[float]] = []
    for x in history:
        if not out or x.best < out[-1][2]:
            out.append([x.evaluations, round(x.wall_time, 3), x.best])
    rows = list(history)
    if rows and out[-1][0] != rows[-1].evaluations:
        out.append([rows[-1].evaluations, round(rows[-1].wall_time, 3), rows[-1].best])
    return out


def _hit(history: list[list[float]], target: float) -> tuple[float, float] | None:
    """(evaluations, seconds) of the first history record at or below ``target``."""
    for ev, secs, best in history:
        if best <= target:
            return ev, secs
    return None


def _fmt(values: list[float | None], unit: str) -> str:
    """``median / worst`` of values, a missing one (not reached) counting as worst."""
    if not values:
        return "-"
    missing = sum(v is None for v in values)
    got = sorted(v for v in values if v is not None)
    if missing * 2 >= len(values):
        med = "-"
    else:
        med = _num(statistics.median(got + [float("inf")] * missing), unit)
    worst = "-" if missing else _num(got[-1], unit)
    return f"{med} / {worst}"


def _num(x: float, unit: str) -> str:
    if unit == "s":
        return f"{x:.1f}" if x < 100 else f"{x:.0f}"
    return f"{x / 1000:.0f}k" if x >= 10000 else f"{x:.0f}"


def _with_best(groups: dict[Any, Any]) -> Any:
    """``(key, items, best known T)`` of each group keyed ``(problem, mode, ...)``, in the
    benchmark's problem order; groups whose problem has no best known (capped) plan skipped."""
    book = BestKnown()
    for key, items in sorted(groups.items(), key=lambda kv: _order(kv[0])):
        best = book.value(key[0], key[1], "capped")
        if best is not None:
            yield key, items, best


def table(args: argparse.Namespace) -> int:
    rows = _read(args.files, None, getattr(args, "seeds", None))
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["problem"], r["mode"], r["label"]), []).append(r)
    print("| problem | mode | run | seeds | s to 0.5 % | evals to 0.5 % | s to 0.1 % | "
          "evals to 0.1 % | final gap median / worst | within 0.5 % | wall median / max | "
          "reference us/plan |")
    print("|---|---|---|---|---|---|---|---|---|---|---|---|")
    for (p, mode, label), rs, best in _with_best(groups):
        cells = []
        timed = all(r.get("timed", True) for r in rs)
        for tol in TARGETS:
            hits = [_hit(r["history"], best * (1 + tol)) for r in rs]
            cells.append(_fmt([h[1] if h else None for h in hits], "s") if timed else "n/t")
            cells.append(_fmt([h[0] if h else None for h in hits], "evals"))
        gaps = sorted(100 * (r["T"] / best - 1) for r in rs)
        within = sum(g <= 100 * TARGETS[0] for g in gaps)
        walls = [r["wall"] for r in rs]
        print(f"| {p} | {mode} | {label} | {len(rs)} | {' | '.join(cells)} | "
              f"{statistics.median(gaps):+.2f} % / {gaps[-1]:+.2f} % | {within}/{len(rs)} | "
              + (f"{_num(statistics.median(walls), 's')} / {_num(max(walls), 's')} |" if timed
                 else "n/t |") + f" {_reference(rs)} |")
    return 0


def _reference(rows: list[dict[str, Any]]) -> str:
    """The median machine speed of the rows that recorded it (``-``: none did)."""
    got = [r["reference_us"] for r in rows if r.get("reference_us")]
    return f"{statistics.median(got):.1f}" if got else "-"


def _read(files: list[str], labels: list[str] | None,
          seeds: str | None) -> list[dict[str, Any]]:
    """The rows of ``files`` with one of ``labels`` (None: any) and one of ``seeds`` (None:
    any)."""
    keep = set(parse_seeds(seeds)) if seeds else None
    return [r for r in read_runs(files) if (labels is None or r["label"] in labels)
            and (keep is None or r["seed"] in keep)]


def pairs(args: argparse.Namespace) -> int:
    """Per seed, T of ``--other`` over T of ``--base`` minus one, in per cent."""
    rows = _read(args.files, [args.base, args.other], args.seeds)
    runs: dict[tuple[str, str, int, str], float] = {}
    for r in rows:
        key = (r["problem"], r["mode"], r["seed"], r["label"])
        if key in runs:
            print(f"plan_speed.py pairs: two runs of {key[3]!r} on {key[0]} {key[1]} seed "
                  f"{key[2]}; expected one per label and seed (use --seeds)", file=sys.stderr)
            return 2
        runs[key] = float(r["T"])
    groups: dict[tuple[str, str], list[float]] = {}
    for (p, mode, seed, label), t in sorted(runs.items()):
        base = runs.get((p, mode, seed, args.base))
        if label == args.other and base is not None:
            groups.setdefault((p, mode), []).append(100 * (t / base - 1))
    if not groups:
        print(f"plan_speed.py pairs: no seed has runs of both {args.base!r} and "
              f"{args.other!r}", file=sys.stderr)
        return 2
    print(f"| problem | mode | seeds | faster with {args.other} | per seed, T {args.other} / "
          f"T {args.base} - 1 | median |")
    print("|---|---|---|---|---|---|")
    totals: dict[str, list[float]] = {}
    for (p, mode), d in sorted(groups.items(), key=lambda kv: _order(kv[0])):
        totals.setdefault(mode, []).extend(d)
        print(f"| {p} | {mode} | {len(d)} | {sum(x < 0 for x in d)} of {len(d)} | "
              f"{', '.join(f'{x:+.2f} %' for x in sorted(d))} | {statistics.median(d):+.2f} % |")
    if len(totals) > 1:
        totals["both"] = [x for d in totals.values() for x in d]
    for mode, d in sorted(totals.items()):
        print(f"| all | {mode} | {len(d)} | {sum(x < 0 for x in d)} of {len(d)} | "
              f"{min(d):+.2f} % to {max(d):+.2f} % | {statistics.median(d):+.2f} % |")
    return 0


def best_of(args: argparse.Namespace) -> int:
    """Runs made side by side as pairs (seed ``k`` beside seed ``k + offset``, one core each,
    started together): per problem and mode, the pair's final T is the better run's, its
    seconds to a target the earlier of the two runs' and its wall the longer run's."""
    rows = _read(args.files, [args.label], None)
    firsts = set(parse_seeds(args.seeds)) if args.seeds else None
    runs: dict[tuple[str, str, int], dict[str, Any]] = {}
    for r in rows:
        key = (r["problem"], r["mode"], r["seed"])
        if key in runs:
            print(f"plan_speed.py best-of: two runs of {args.label!r} on {key[0]} {key[1]} "
                  f"seed {key[2]}; expected one per seed", file=sys.stderr)
            return 2
        runs[key] = r
    groups: dict[tuple[str, str], list[tuple[dict[str, Any], dict[str, Any]]]] = {}
    for (p, mode, seed), r in sorted(runs.items()):
        other = runs.get((p, mode, seed + args.offset))
        if other is not None and (firsts is None or seed in firsts):
            groups.setdefault((p, mode), []).append((r, other))
    if not groups:
        print(f"plan_speed.py best-of: no run of {args.label!r} has one at seed + "
              f"{args.offset} beside it", file=sys.stderr)
        return 2
    print("| problem | mode | run | pairs | s to 0.5 % | s to 0.1 % | final gap median / worst "
          "| within 0.5 % | wall median / max | reference us/plan |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for (p, mode), prs, best in _with_best(groups):
        cells = []
        for tol in TARGETS:
            secs = []
            for pair in prs:
                hits = [h[1] for h in (_hit(r["history"], best * (1 + tol)) for r in pair) if h]
                secs.append(min(hits) if hits else None)
            cells.append(_fmt(secs, "s"))
        gaps = sorted(100 * (min(a["T"], b["T"]) / best - 1) for a, b in prs)
        within = sum(g <= 100 * TARGETS[0] for g in gaps)
        walls = [max(a["wall"], b["wall"]) for a, b in prs]
        seeds = ", ".join(f"{a['seed']}+{b['seed']}" for a, b in prs)
        print(f"| {p} | {mode} | {args.label}, best of a pair | {len(prs)} ({seeds}) | "
              f"{' | '.join(cells)} | {statistics.median(gaps):+.2f} % / {gaps[-1]:+.2f} % | "
              f"{within}/{len(prs)} | {_num(statistics.median(walls), 's')} / "
              f"{_num(max(walls), 's')} | {_reference([r for pr in prs for r in pr])} |")
    return 0


def best_at(history: list[list[float]], evaluations: float) -> float | None:
    """The best T of a run's history after ``evaluations`` (None: its first record is later)."""
    got = [best for ev, _secs, best in history if ev <= evaluations]
    return min(got) if got else None


def at_evaluations(args: argparse.Namespace) -> int:
    """Per problem and mode, each label's gap at the fewest evaluations any of the runs made."""
    labels = args.label
    rows = _read(args.files, labels, args.seeds)
    if not rows:
        print(f"plan_speed.py at-evaluations: no runs labelled "
              f"{' or '.join(map(repr, labels))}", file=sys.stderr)
        return 2
    groups: dict[tuple[str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["problem"], r["mode"]), []).append(r)
    print("| problem | mode | run | seeds | evaluations min / median / max | at evaluations | "
          "gap there median / worst |")
    print("|---|---|---|---|---|---|---|")
    for (p, mode), rs, best in _with_best(groups):
        at = min(r["evaluations"] for r in rs)
        for label in labels:
            mine = [r for r in rs if r["label"] == label]
            if not mine:
                continue
            ev = sorted(r["evaluations"] for r in mine)
            found = [best_at(r["history"], at) for r in mine]
            gaps = sorted(100 * (t / best - 1) for t in found if t is not None)
            gap = ("-" if len(gaps) < len(found) else
                   f"{statistics.median(gaps):+.2f} % / {gaps[-1]:+.2f} %")
            print(f"| {p} | {mode} | {label} | {len(mine)} | {_mega(ev[0])} / "
                  f"{_mega(statistics.median(ev))} / {_mega(ev[-1])} | {_mega(at)} | {gap} |")
    return 0


def searches(args: argparse.Namespace) -> int:
    """Per problem, mode and label, runs of searches side by side (rows with ``search_T``):
    how often each search gave the plan, each search's final gap, the coarse phase's gap of
    each coarse search, and with ``--against`` search 0's evaluations over those of that
    label's run of the same seed."""
    rows = [r for r in _read(args.files, args.label, args.seeds) if r.get("search_T")]
    if not rows:
        print("plan_speed.py searches: no runs of searches side by side (rows with search_T)"
              + (f" labelled {' or '.join(map(repr, args.label))}" if args.label else ""),
              file=sys.stderr)
        return 2
    against: dict[tuple[str, str, int], float] = {}
    if args.against:
        for r in _read(args.files, [args.against], args.seeds):
            against[(r["problem"], r["mode"], r["seed"])] = float(r["evaluations"])
    groups: dict[tuple[str, str, str], list[dict[str, Any]]] = {}
    for r in rows:
        groups.setdefault((r["problem"], r["mode"], r["label"]), []).append(r)
    print("| problem | mode | run | seeds | plan from search 0 / 1 / ... | final gap median / "
          "worst per search | coarse phase gap median / worst | search 0 evaluations over "
          f"{args.against or '-'}'s min / median / max |")
    print("|---|---|---|---|---|---|---|---|")
    for (p, mode, label), rs, best in _with_best(groups):
        k = max(len(r["search_T"]) for r in rs)
        wins = [0] * k
        for r in rs:
            ts = r["search_T"]
            wins[min(range(len(ts)), key=lambda i: (ts[i], i))] += 1
        per = []
        for i in range(k):
            g = sorted(100 * (r["search_T"][i] / best - 1) for r in rs
                       if _nth(r["search_T"], i) is not None)
            per.append(f"{i}: {statistics.median(g):+.2f} % / {g[-1]:+.2f} %")
        coarse = []
        for i in range(k):
            g = sorted(100 * (r["search_coarse_T"][i] / best - 1) for r in rs
                       if _nth(r.get("search_coarse_T"), i) is not None)
            if g:
                coarse.append(f"{i}: {statistics.median(g):+.2f} % / {g[-1]:+.2f} %")
        ratios = sorted(r["search_evaluations"][0] / against[(p, mode, r["seed"])]
                        for r in rs if (p, mode, r["seed"]) in against)
        ratio = (f"{ratios[0]:.2f} / {statistics.median(ratios):.2f} / {ratios[-1]:.2f}"
                 if ratios else "-")
        print(f"| {p} | {mode} | {label} | {len(rs)} | {' / '.join(map(str, wins))} | "
              f"{'; '.join(per)} | {'; '.join(coarse) or '-'} | {ratio} |")
    return 0


def _nth(values: list[Any] | None, i: int) -> Any:
    """``values[i]``, None where the row has no such entry (fewer searches, no coarse field)."""
    return values[i] if values is not None and i < len(values) else None


def _mega(x: float) -> str:
    """Evaluations in millions, below that as :func:`_num` writes them."""
    return f"{x / 1e6:.1f}M" if x >= 1e6 else _num(x, "evals")


def offer(args: argparse.Namespace) -> int:
    """Every run's saved plan as a best-known candidate (re-simulated before it is taken)."""
    from umpipe_bench.bench.best_known import Candidate, update

    rows = read_runs(args.files)
    today = time.strftime("%Y-%m-%d")
    cands = [Candidate(r["problem"], r["mode"], Path(r["plan_file"]), float(r["T"]),
                       f"tidgap ({r['label']})", today)
             for r in rows if r.get("plan_file") and Path(r["plan_file"]).exists()]
    rep = update(cands)
    for e in rep.accepted:
        print(f"{e.problem} {e.mode} {e.family}: {e.value!r} ({e.planner})")
    for line in rep.refused:
        print(f"refused: {line}", file=sys.stderr)
    return 0


def _seeds_arg(text: str) -> str:
    """argparse ``type`` of ``--seeds``: the text, once :func:`parse_seeds` reads it."""
    try:
        parse_seeds(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None
    return text


def _positive(text: str) -> int:
    """argparse ``type`` of ``--offset``: an integer >= 1."""
    try:
        n = int(text)
    except ValueError:
        n = 0
    if n < 1:
        raise argparse.ArgumentTypeError(f"expected an integer >= 1, got {text!r}")
    return n


def _reader(sub: Any, name: str, help: str) -> argparse.ArgumentParser:
    """A sub-command that reads run files, with ``--seeds``."""
    c = sub.add_parser(name, help=help)
    c.add_argument("files", nargs="+")
    c.add_argument("--seeds", default=None, type=_seeds_arg,
                   help="only these seeds, e.g. 0-4; default: all")
    return c


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="run TiDGAP, one JSON line per run")
    r.add_argument("--label", required=True, help="the run's name in the table")
    r.add_argument("--budget", default=None, help="a --budget string; default: the planner's")
    r.add_argument("--problems", default=None, help="comma-separated; default: see above")
    r.add_argument("--modes", default="stash,recompute")
    r.add_argument("--seeds", default="0-9", type=_seeds_arg, help="e.g. 0-9 or 0,3,5")
    r.add_argument("--set", action="append", metavar="KEY=VALUE", help="a TiDGAP setting")
    r.add_argument("--out", required=True, help="JSON lines file (appended)")
    r.add_argument("--plans", default=None, help="folder for the final plans")
    r.add_argument("--untimed", action="store_true",
                   help="the machine is not idle: the table shows no times for these runs")
    r.set_defaults(func=run)
    b = sub.add_parser("best-known", help="offer every run's plan (--plans) to the "
                       "best-known file (umpipe_bench/problems/best_known.json)")
    b.add_argument("files", nargs="+")
    b.set_defaults(func=offer)
    t = _reader(sub, "table", "the markdown table of run files")
    t.set_defaults(func=table)
    p = _reader(sub, "pairs", "a screen: the final T of --other against --base, seed by seed")
    p.add_argument("--base", required=True, help="the label compared against")
    p.add_argument("--other", required=True, help="the label compared")
    p.set_defaults(func=pairs)
    o = _reader(sub, "best-of", "runs made side by side as pairs (seed k beside seed "
                "k + --offset): the better run of each pair, per problem and mode")
    o.add_argument("--label", required=True, help="the runs' label")
    o.add_argument("--offset", type=_positive, default=10,
                   help="seed k ran beside seed k + OFFSET (default: 10); --seeds picks k")
    o.set_defaults(func=best_of)
    a = _reader(sub, "at-evaluations", "each label's gap to the best known at the fewest "
                "evaluations any of the runs made, per problem and mode")
    a.add_argument("--label", action="append", required=True,
                   help="a run label (repeat the option for each; labels may hold commas)")
    a.set_defaults(func=at_evaluations)
    c = _reader(sub, "searches", "runs of searches side by side: which search gave the "
                "plan, each one's final gap, the coarse phase's, per problem and mode")
    c.add_argument("--label", action="append", default=None,
                   help="only this run label (repeat for more); default: every label")
    c.add_argument("--against", default=None, help="a label run on the same seeds: search "
                   "0's evaluations over its run's")
    c.set_defaults(func=searches)
    args = ap.parse_args()
    try:
        return int(args.func(args))
    except RunFileError as e:
        print(f"plan_speed.py {args.cmd}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
