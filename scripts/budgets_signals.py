"""Budgets are limits, signals act within a second: the figures of
results/perf/budgets-signals.md.

    python scripts/budgets_signals.py > results/perf/budgets-signals.md
    python scripts/budgets_signals.py --quick      # a few cases of each part

1. **Time budgets.** ``umpipe-bench plan --budget secs:X --json --no-progress`` in a fresh
   process per case: the wall time from the process's start to its exit (interpreter start,
   imports, loading the problem and the report included: what a user waits), the evaluations
   and why the run ended; the overshoot over X against the limit, the larger of 10 % of X
   and 1 s. Two rows run with an empty numba cache (every kernel compiled during the run, as
   on the first run after an install). Planners that ignore time budgets (one-shot
   constructions) are listed apart.
2. **Signals.** Each command started in its own session; after a delay SIGINT or SIGTERM;
   the time from the signal to the exit, the exit code, the processes it started that are
   still alive half a second after it exited, and what it saved.

The machine is shared (2 cores; other work runs beside it), so wall times drift; the load
average is printed with each table.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BIG = "sim-s128-b2048-s0"

#: (problem, planner, mode, seconds, settings)
BUDGETS = [
    *[(BIG, "tidgap", m, x, ()) for m in ("stash", "recompute") for x in (5, 20, 60)],
    *[("sim-s64-b1024-s0", "tidgap", m, x, ()) for m in ("stash", "recompute") for x in (5, 20)],
    ("sim-s8-b2048-s0", "tidgap", "stash", 5, ()),
    ("sim-s128-b64-s0", "tidgap", "recompute", 5, ()),
    ("sim-s32-b256-s0", "tidgap", "stash", 5, ()),
    ("vgg16", "tidgap", "stash", 5, ()),
    ("gpt1-14", "tidgap", "recompute", 5, ()),
    (BIG, "tidgap", "stash", 20, ("schedule=gpipe",)),
    *[(BIG, p, "stash", 20, ()) for p in ("dgap", "random-search", "optuna-tpe", "optuna-cmaes",
                                          "optuna-ga", "nevergrad-ngopt",
                                          "nevergrad-discrete11", "pymoo-ga", "cmaes")],
    *[("sim-s32-b256-s0", p, "stash", 10, ()) for p in (
        "dgap", "random-search", "optuna-tpe", "optuna-cmaes", "optuna-ga", "nevergrad-ngopt",
        "nevergrad-discrete11", "pymoo-ga", "cmaes")],
    *[("vgg16", p, "stash", 10, ()) for p in ("cmaes", "optuna-cmaes")],
]
COLD = [(BIG, "tidgap", "stash", 20, ()), ("sim-s8-b64-s0", "tidgap", "stash", 5, ())]
UNTIMED = [(BIG, p, "stash", 5, ()) for p in ("gpipe", "1f1b", "local-greedy", "greedy-dp")]
QUICK_BUDGETS = [BUDGETS[0], BUDGETS[1], BUDGETS[10], BUDGETS[16]]

MATRIX = """
[bench]
problems = ["sim-s32-b256-s0"]
seeds = [0, 1, 2, 3]
budgets = ["evals:300000"]

[[planners]]
name = "tidgap"
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(ROOT), os.environ.get("PYTHONPATH", "")) if p)}


def _cli(*args: str) -> list[str]:
    return [sys.executable, "-m", "umpipe_bench", *args]


def load() -> str:
    return "load average " + " / ".join(f"{x:.2f}" for x in os.getloadavg())


# --------------------------------------------------------------------------- budgets
def run_budget(problem: str, planner: str, mode: str, secs: float, sets: tuple[str, ...],
               cold: bool = False) -> dict:
    """One ``plan`` run; ``cold``: with an empty numba cache (every kernel compiled in the
    run, as the first run after an install)."""
    args = ["plan", "--problem", problem, "--planner", planner, "--mode", mode, "--budget",
            f"secs:{secs:g}", "--json", "--no-progress"]
    for s in sets:
        args += ["--set", s]
    with tempfile.TemporaryDirectory(prefix="umpipe-numba-") as cache:
        env = {**_env(), **({"NUMBA_CACHE_DIR": cache} if cold else {})}
        t0 = time.perf_counter()
        proc = subprocess.run(_cli(*args), capture_output=True, text=True, env=env)
        wall = time.perf_counter() - t0
    label = planner + "".join(f" {s}" for s in sets) + (" (cold numba cache)" if cold else "")
    row = {"problem": problem, "planner": label,
           "mode": mode, "budget": f"secs:{secs:g}", "wall": wall, "rc": proc.returncode,
           "limit": max(0.1 * secs, 1.0)}
    try:
        out = json.loads(proc.stdout.strip().splitlines()[-1])
        row.update(evaluations=out["evaluations"], stopped=out.get("stopped") or "",
                   T=out["iteration_time"])
    except (IndexError, ValueError, KeyError):
        last = (proc.stderr.strip().splitlines() or ["?"])[-1]
        row.update(evaluations="", stopped=f"no result: {last[:90]}", T=None)
    return row


def budget_table(rows: list[dict], untimed: bool = False) -> list[str]:
    head = ("| problem | planner | mode | budget | wall (s) | evaluations | overshoot (s) | "
            "limit (s) | ended |")
    if untimed:
        head = "| problem | planner | mode | budget | wall (s) | evaluations | ended |"
    lines = [head, "|" + "---|" * (head.count("|") - 1)]
    for r in rows:
        over = r["wall"] - float(r["budget"].split(":")[1])
        end = r["stopped"] or "at the budget"
        if "during seeding (" in end:
            end = "in seeding: " + end.split("during seeding (", 1)[1].split(")", 1)[0]
        if untimed:
            lines.append(f"| {r['problem']} | {r['planner']} | {r['mode']} | {r['budget']} | "
                         f"{r['wall']:.2f} | {r['evaluations']} | {r['stopped'] or 'its end'} |")
            continue
        ok = "" if over <= r["limit"] else " **over**"
        lines.append(f"| {r['problem']} | {r['planner']} | {r['mode']} | {r['budget']} | "
                     f"{r['wall']:.2f} | {r['evaluations']} | {over:+.2f}{ok} | "
                     f"{r['limit']:.1f} | {end} |")
    return lines


# --------------------------------------------------------------------------- signals
def _stat(pid: int) -> list[bytes] | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as fh:
            return fh.read().rsplit(b")", 1)[1].split()
    except OSError:
        return None


def _tree(root: int) -> set[int]:
    """``root``'s live descendants and the live processes of its session."""
    parents, sessions = {}, {}
    for e in os.listdir("/proc"):
        if e.isdigit() and (st := _stat(int(e))) and st[0] != b"Z":
            parents[int(e)], sessions[int(e)] = int(st[1]), int(st[4])
    found, frontier = set(), {root}
    while frontier:
        frontier = {p for p, pp in parents.items() if pp in frontier} - found
        found |= frontier
    return (found | {p for p, s in sessions.items() if s == root}) - {root}


def _alive(pid: int) -> bool:
    st = _stat(pid)
    return st is not None and st[0] != b"Z"


def run_signal(name: str, args: list[str], after: float, sig: int, saved, cwd: Path) -> dict:
    proc = subprocess.Popen(_cli(*args), cwd=cwd, env=_env(), stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True,
                            preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_DFL))
    time.sleep(after)
    kids = _tree(proc.pid)
    t0 = time.perf_counter()
    proc.send_signal(sig)
    try:
        _, err = proc.communicate(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        _, err = proc.communicate()
    latency = time.perf_counter() - t0
    time.sleep(0.5)
    left = sorted(p for p in kids | _tree(proc.pid) if _alive(p))
    for p in left:
        try:
            os.kill(p, signal.SIGKILL)
        except OSError:
            pass
    return {"name": name, "signal": signal.Signals(sig).name, "after": after,
            "latency": latency, "rc": proc.returncode, "children": len(kids), "left": left,
            "saved": saved(), "traceback": "Traceback" in err}


def signal_cases(tmp: Path, quick: bool) -> list[tuple]:
    plan_out = tmp / "plan.json"
    bench_out = tmp / "bench"
    (tmp / "m.toml").write_text(MATRIX)

    def plan_saved() -> str:
        if not plan_out.exists():
            return "no plan (none evaluated yet)"
        meta = json.loads(plan_out.read_text())["meta"]
        text = f"plan, T = {meta['predicted_time']:.4g} s, meta.interrupted = " \
               f"{meta.get('interrupted')}"
        plan_out.unlink()
        return text

    def rows(path: Path) -> str:
        if not path.exists():
            return "no file (no row finished)"
        n = len(path.read_text().strip().splitlines()) - 1
        return f"{path.name}: {n} complete rows"

    def bench_saved() -> str:
        text = rows(bench_out / "leaderboard.csv")
        subprocess.run(["rm", "-rf", str(bench_out)])
        return text

    def study_saved() -> str:
        text = rows(tmp / "study" / "heterogeneity.csv")
        subprocess.run(["rm", "-rf", str(tmp / "study")])
        return text

    def tune_saved() -> str:
        db = tmp / "t.db"
        if not db.exists():
            return "no study"
        import sqlite3

        with sqlite3.connect(db) as c:
            states = dict(c.execute("select state, count(*) from trials group by state"))
        db.unlink()
        return "optuna storage: " + ", ".join(f"{n} {s.lower()}" for s, n in states.items())

    def profile_saved() -> str:
        p = tmp / "p.json"
        return "problem file written" if p.exists() else "nothing (no partial profile)"

    def nothing() -> str:
        return "-"

    plan = ["plan", "--problem", BIG, "--budget", "secs:300", "--out", str(plan_out),
            "--no-progress"]
    bench = ["bench", "--config", str(tmp / "m.toml"), "--out", str(bench_out),
             "--no-progress"]
    study = ["study", "--stages", "32", "--batches", "256", "--modes", "stash", "--h", "0,1",
             "--seeds", "2", "--budget", "evals:200000", "--out", str(tmp / "study"),
             "--no-progress", "--no-gantt"]
    tune = ["tune", "--train", "sim-s32-b256-s0", "--heldout", "sim-s16-b64-s0", "--budget",
            "evals:40000", "--trials", "20", "--storage", f"sqlite:///{tmp}/t.db", "--save",
            str(tmp / "t.json"), "--report", str(tmp / "t.md"), "--no-progress"]
    TERM, INT = signal.SIGTERM, signal.SIGINT
    cases = [
        ("plan (EDP reference scans)", plan, 3, TERM, plan_saved),
        ("plan (seeding)", plan, 12, TERM, plan_saved),
        ("plan (seeding)", plan, 12, INT, plan_saved),
        ("plan (search)", plan, 40, INT, plan_saved),
        ("plan (search)", plan, 40, TERM, plan_saved),
        ("plan --mode recompute", [*plan, "--mode", "recompute"], 30, INT, plan_saved),
        ("bench", bench, 20, INT, bench_saved),
        ("bench --jobs 2", [*bench, "--jobs", "2"], 20, TERM, bench_saved),
        ("bench --executor dask --jobs 2", [*bench, "--jobs", "2", "--executor", "dask"], 25, INT,
         bench_saved),
        ("tune", tune, 20, TERM, tune_saved),
        ("study", study, 15, INT, study_saved),
        ("study --jobs 2", [*study, "--jobs", "2"], 15, TERM, study_saved),
        (f"schedules ({BIG}, D = 8)", ["schedules", "--problem", BIG, "--devices", "8"], 45, INT,
         nothing),
        (f"simulate ({BIG}, gpipe:2048)", ["simulate", "--problem", BIG, "--plan",
                                          "gpipe:2048"], 2, TERM, nothing),
        ("profile gpt1-mini", ["profile", "gpt1-mini", "-B", "16", "--out",
                                                  str(tmp / "p.json"), "--no-progress"], 8, INT,
         profile_saved),
        ("profile gpt1-mini --repeats 40",
         ["profile", "gpt1-mini", "-B", "16", "--repeats", "40", "--out", str(tmp / "p.json"),
          "--no-progress"], 25, TERM, profile_saved),
        ("execute gpt1-mini-s2", ["execute", "--problem", "gpt1-mini-s2", "--plan", "gpipe:4",
                                  "--iters", "200", "--no-peer"], 20, TERM, nothing),
        ("execute gpt1-mini-s2", ["execute", "--problem", "gpt1-mini-s2", "--plan", "gpipe:4",
                                  "--iters", "200", "--no-peer"], 20, INT, nothing),
        ("best-known check", ["best-known", "check"], 0.8, INT, nothing),
    ]
    return cases[:1] + cases[3:4] + cases[11:12] if quick else cases


def signal_table(rows: list[dict]) -> list[str]:
    lines = ["| command | signal | after (s) | latency (s) | exit | children | left | saved |",
             "|---|---|---|---|---|---|---|---|"]
    for r in rows:
        left = ", ".join(map(str, r["left"])) or "none"
        tb = " (traceback)" if r["traceback"] else ""
        flag = "" if r["latency"] <= 1.0 else " **over**"
        lines.append(f"| {r['name']} | {r['signal']} | {r['after']:g} | {r['latency']:.2f}"
                     f"{flag} | {r['rc']}{tb} | {r['children']} | {left} | {r['saved']} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true", help="a few cases of each part")
    ap.add_argument("--part", choices=("budgets", "signals", "both"), default="both")
    args = ap.parse_args()
    out = ["# Budgets are limits, signals act within a second", "",
           "Made by `python scripts/budgets_signals.py > results/perf/budgets-signals.md` "
           "(docs/ARCHITECTURE.md, \"Budgets and signals\"); one machine of 2 cores shared "
           "with other work, so wall times drift.", ""]
    if args.part in ("budgets", "both"):
        cases = [(c, False) for c in (QUICK_BUDGETS if args.quick else BUDGETS)]
        cases += [] if args.quick else [(c, True) for c in COLD]
        rows = []
        for c, cold in cases:
            rows.append(run_budget(*c, cold=cold))
            print(f"budget {len(rows)}/{len(cases)}: {rows[-1]['wall']:.1f} s", file=sys.stderr)
        ran = [r for r in rows if r["T"] is not None]
        within = [r for r in ran if r["wall"] - float(r["budget"][5:]) <= r["limit"]]
        worst = max(ran, key=lambda r: (r["wall"] - float(r["budget"][5:])) / r["limit"])
        out += ["## Time budgets", "",
                "`umpipe-bench plan --problem P --planner p --mode M --budget secs:X --json "
                "--no-progress`, one process per row; wall: from its start to its exit; "
                "overshoot: wall - X, against max(10 % of X, 1 s). "
                f"{load()} at the end.", "",
                f"{len(within)} of the {len(ran)} runs that returned a plan ended within the "
                f"limit (largest overshoot: {worst['wall'] - float(worst['budget'][5:]):+.2f} s, "
                f"{worst['planner']} on {worst['problem']} {worst['mode']} {worst['budget']}); "
                f"{len(rows) - len(ran)} returned no plan (the last line of their stderr is "
                "shown).", "", *budget_table(rows), ""]
        if not args.quick:
            rows = [run_budget(*c) for c in UNTIMED]
            out += ["One-shot constructions (no time budget: they ignore `secs:`):", "",
                    *budget_table(rows, untimed=True), ""]
    if args.part in ("signals", "both"):
        rows = []
        with tempfile.TemporaryDirectory(prefix="umpipe-signals-") as tmp:
            cases = signal_cases(Path(tmp), args.quick)
            for c in cases:
                rows.append(run_signal(*c, cwd=Path(tmp)))
                print(f"signal {len(rows)}/{len(cases)}: {rows[-1]['latency']:.2f} s",
                      file=sys.stderr)
        out += ["## Signals", "",
                "Each command in its own session (`start_new_session`, SIGINT not ignored); "
                "after the delay, the signal; latency: from the signal to the exit; children: "
                "processes it had started then; left: those alive 0.5 s after the exit. "
                f"{load()} at the end.", "",
                f"{sum(r['latency'] <= 1.0 for r in rows)} of {len(rows)} commands ended "
                f"within 1 s of the signal (largest: {max(r['latency'] for r in rows):.2f} s); "
                f"{sum(bool(r['left']) for r in rows)} left a process behind.", "",
                *signal_table(rows), ""]
    print("\n".join(out))


if __name__ == "__main__":
    main()
