"""Generated bad inputs for every sub-command: the fuzz harness's cases and their runner.

Each :class:`Case` is one command line in which exactly one thing is odd: a mutated input file
(truncated, non-UTF-8, a key dropped, misspelled or added, a value of the wrong type or range),
an odd output path (missing folder, a directory, a device file, a symlink), an odd number, an
odd name or an odd storage URL. Every other argument is valid and small, so a case that is
accepted finishes in seconds.

A case passes when the command ends with exit code 0, 1, 2, 130 or 143, prints no Python
traceback, does not hang, and changes nothing outside its working folder: the inputs folder,
the repository tree and the device files keep their content and kind.

``python tests/fuzz_cases.py`` prints how many cases each sub-command gets in the fast slice,
the CI slice and the full set; ``python tests/fuzz_cases.py --run [--fast]`` runs them all (or
the fast slice) and lists failures.
"""

from __future__ import annotations

import copy
import csv
import hashlib
import io
import json
import os
import random
import stat
import subprocess
import sys
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
ALLOWED_EXIT = {0, 1, 2, 130, 143}
DEVICES = ("/dev/null", "/dev/full")
DEVICE_NUMBERS = {"/dev/null": (1, 3), "/dev/full": (1, 7)}
LINKS = {"link.json": "target.json", "link-existing.json": "existing.json"}

# Values that are wrong for a numeric option but never a legitimately huge amount of work.
ODD_NUMBERS = ("-1", "0", "abc", "", "nan", "inf", "-inf", "1.5", "1e400", "-0", "0x10",
               "99999999999999999999999")
# For counts whose large values are legitimately long work (trials, seeds per point).
ODD_COUNTS = tuple(v for v in ODD_NUMBERS if len(v) < 20)
ODD_NAMES = ("", "no-such-thing", "../../etc/passwd", "ä", "a" * 300, "-", "sim-s2-b8-s0,",
             "*")
ODD_BUDGETS = ("evals:-1", "evals:0", "evals:", "secs:-1", "secs:nan", "gens:abc", "foo:3",
               "evals:1.5", "evals:10,evals:20", ":", "evals:100,", "secs:inf")
ODD_SIZES = ("-1", "0", "abc", "1e400", "5XiB", "nan", "-3GiB", "", "1.5B")
# JSON values that replace a field of a valid file.
ODD_VALUES = (None, "x", -1, 0, -0.5, 1e308, True, [], {}, [[]], "NaN", 2**70)


@dataclass(frozen=True)
class Case:
    """One command line with one odd thing in it (``label`` says which)."""

    command: str
    label: str
    argv: tuple[str, ...]
    timeout: float = 90.0
    heavy: bool = False  # imports torch or launches processes: full set only

    @property
    def id(self) -> str:
        return f"{self.command}:{self.label}"


@dataclass
class Inputs:
    """Valid input files (written once) and the places a case may write."""

    base: Path
    files: dict[str, Path] = field(default_factory=dict)

    @property
    def inp(self) -> Path:
        return self.base / "in"

    @property
    def work(self) -> Path:
        return self.base / "work"


# --- valid inputs -----------------------------------------------------------------------

MATRIX = """\
[bench]
name = "fuzz"
problems = ["sim-s2-b8-s0"]
modes = ["stash"]
seeds = [0]
budgets = ["evals:200"]

[[planners]]
name = "gpipe"

[[planners]]
name = "tidgap"
settings = { population = 8 }
"""


def _run(argv: list[str], cwd: Path, timeout: float = 120) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    return subprocess.run([sys.executable, "-m", "umpipe_bench", *argv], cwd=cwd, env=env,
                          capture_output=True, text=True, timeout=timeout, check=False)


def make_inputs(base: Path) -> Inputs:
    """Write the valid inputs every case starts from (a problem, a plan, a matrix, a
    leaderboard, a best-known file) into ``base/in``."""
    ins = Inputs(base)
    ins.inp.mkdir(parents=True, exist_ok=True)
    ins.work.mkdir(parents=True, exist_ok=True)
    src = ROOT / "umpipe_bench" / "problems" / "data" / "gpt1-mini-s2.json"
    prob = ins.inp / "problem.json"
    prob.write_bytes(src.read_bytes())
    ins.files["problem"] = prob
    plan = ins.inp / "plan.json"
    r = _run(["plan", "--problem", str(prob), "--budget", "evals:200", "--no-progress",
              "--out", str(plan)], ins.work)
    if r.returncode != 0:
        raise RuntimeError(f"fuzz inputs: plan failed: {r.stderr[-2000:]}")
    ins.files["plan"] = plan
    matrix = ins.inp / "matrix.toml"
    matrix.write_text(MATRIX, encoding="utf-8")
    ins.files["matrix"] = matrix
    out = base / "seed-bench"
    r = _run(["bench", "--config", str(matrix), "--out", str(out), "--no-progress"], ins.work)
    if r.returncode != 0:
        raise RuntimeError(f"fuzz inputs: bench failed: {r.stderr[-2000:]}")
    board = ins.inp / "leaderboard.csv"
    board.write_bytes((out / "leaderboard.csv").read_bytes())
    ins.files["csv"] = board
    bk = ins.inp / "best_known.json"
    bk.write_bytes((ROOT / "umpipe_bench" / "problems" / "best_known.json").read_bytes())
    ins.files["best_known"] = bk
    (ins.work / "bk.json").write_bytes(bk.read_bytes())
    (ins.inp / "text.txt").write_text("not a database\n", encoding="utf-8")
    (ins.work / "existing.json").write_text("{}\n", encoding="utf-8")
    for link, target in LINKS.items():  # link.json dangles until a case writes through it
        os.symlink(ins.work / target, ins.work / link)
    (ins.work / "adir").mkdir()
    return ins


# --- mutations of input files -----------------------------------------------------------

def _leaf_paths(obj, prefix=()) -> Iterator[tuple]:
    yield prefix
    if isinstance(obj, dict):
        for k, v in obj.items():
            yield from _leaf_paths(v, (*prefix, k))
    elif isinstance(obj, list):
        for i, v in enumerate(obj[:3]):
            yield from _leaf_paths(v, (*prefix, i))


def _set(obj, path, value):
    for p in path[:-1]:
        obj = obj[p]
    obj[path[-1]] = value


def _typo(key: str, rng: random.Random) -> str:
    if len(key) > 2 and rng.random() < 0.5:
        i = rng.randrange(len(key))
        return key[:i] + key[i + 1:]
    return key + rng.choice("sx_")


def json_mutations(raw: bytes, rng: random.Random, n: int) -> list[tuple[str, bytes]]:
    """``n`` mutated versions of a JSON document (label, bytes), plus the byte-level ones."""
    out: list[tuple[str, bytes]] = [
        ("empty", b""),
        ("truncated", raw[: len(raw) // 2]),
        ("non-utf8", raw[:1] + b"\xff\xfe\x80" + raw[1:]),
        ("not-an-object", b"[1, 2, 3]\n"),
        ("null", b"null\n"),
    ]
    doc = json.loads(raw)
    paths = [p for p in _leaf_paths(doc) if p]
    for _ in range(n):
        d = copy.deepcopy(doc)
        kind = rng.choice(("drop", "typo", "add", "value", "value", "value"))
        path = rng.choice(paths)
        parent = d
        for p in path[:-1]:
            parent = parent[p]
        last = path[-1]
        if kind in ("drop", "typo") and isinstance(parent, dict):
            v = parent.pop(last)
            if kind == "typo":
                parent[_typo(str(last), rng)] = v
            label = f"{kind}:{'.'.join(map(str, path))}"
        elif kind == "add" and isinstance(parent, dict):
            parent["unexpected_" + str(last)] = 1
            label = f"add:{'.'.join(map(str, path))}"
        else:
            val = rng.choice(ODD_VALUES)
            _set(d, path, val)
            label = f"value:{'.'.join(map(str, path))}={json.dumps(val)[:20]}"
        out.append((label, json.dumps(d, indent=1).encode()))
    return out


TOML_MUTATIONS = (
    ("empty", b""),
    ("non-utf8", b"\xff\xfe" + MATRIX.encode()),
    ("truncated", MATRIX.encode()[:70]),
    ("no-bench-table", MATRIX.replace("[bench]", "[benchx]").encode()),
    ("problems-not-list", MATRIX.replace('problems = ["sim-s2-b8-s0"]', "problems = 3").encode()),
    ("unknown-problem", MATRIX.replace("sim-s2-b8-s0", "nope-s2").encode()),
    ("no-problems", MATRIX.replace('problems = ["sim-s2-b8-s0"]', "problems = []").encode()),
    ("negative-seed", MATRIX.replace("seeds = [0]", "seeds = [-1]").encode()),
    ("float-seed", MATRIX.replace("seeds = [0]", "seeds = [0.5]").encode()),
    ("bool-seed", MATRIX.replace("seeds = [0]", "seeds = [true]").encode()),
    ("bad-mode", MATRIX.replace('modes = ["stash"]', 'modes = ["stasj"]').encode()),
    ("bad-budget", MATRIX.replace("evals:200", "evals:-5").encode()),
    ("typo-key", MATRIX.replace("budgets =", "budget =").encode()),
    ("unknown-planner", MATRIX.replace('name = "gpipe"', 'name = "gpipee"').encode()),
    ("module-planner", MATRIX.replace('name = "gpipe"', 'name = "os:system"').encode()),
    ("bad-setting", MATRIX.replace("population = 8", "population = -8").encode()),
    ("unknown-setting", MATRIX.replace("population = 8", "populaton = 8").encode()),
    ("setting-type", MATRIX.replace("population = 8", 'population = "many"').encode()),
    ("duplicate-planner", (MATRIX + '\n[[planners]]\nname = "gpipe"\n').encode()),
    ("duplicate-key", MATRIX.replace('name = "fuzz"', 'name = "fuzz"\nname = "x"').encode()),
    ("memory-cap-negative", MATRIX.replace("[bench]", '[bench]\nmemory_cap = "-1GiB"').encode()),
)


def csv_mutations(raw: bytes, rng: random.Random, n: int) -> list[tuple[str, bytes]]:
    """Mutated leaderboards: byte-level damage, a column dropped, a cell made odd."""
    out: list[tuple[str, bytes]] = [
        ("empty", b""),
        ("header-only", raw.split(b"\n", 1)[0] + b"\n"),
        ("truncated", raw[: len(raw) * 2 // 3]),
        ("non-utf8", raw[:5] + b"\xff\xfe" + raw[5:]),
        ("not-csv", b"\x00\x01\x02 binary\n"),
    ]
    rows = list(csv.reader(io.StringIO(raw.decode())))
    header, body = rows[0], rows[1:]
    for _ in range(n):
        h, b = list(header), [list(r) for r in body]
        kind = rng.choice(("drop-column", "cell", "cell", "extra-column"))
        col = rng.randrange(len(h))
        if kind == "drop-column":
            label = f"drop-column:{h[col]}"
            del h[col]
            for r in b:
                del r[col]
        elif kind == "extra-column":
            label = "extra-column"
            h.append("zz")
            for r in b:
                r.append("1")
        else:
            odd = rng.choice(("", "nan", "abc", "-1", "inf", "1e400", '{"a":'))
            label = f"cell:{h[col]}={odd}"
            for r in b:
                r[col] = odd
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerows([h, *b])
        out.append((label, buf.getvalue().encode()))
    return out


# --- the cases --------------------------------------------------------------------------

def _write(ins: Inputs, name: str, data: bytes) -> str:
    p = ins.inp / "mut" / name
    p.parent.mkdir(exist_ok=True)
    p.write_bytes(data)
    return str(p)


def odd_out_paths(ins: Inputs, suffix: str) -> list[tuple[str, str]]:
    w = ins.work
    return [
        ("missing-folder", str(w / "nope" / f"x{suffix}")),
        ("a-directory", str(w / "adir")),
        ("dev-null", "/dev/null"),
        ("dev-full", "/dev/full"),
        ("dangling-symlink", str(w / "link.json")),
        ("symlink", str(w / "link-existing.json")),
        ("empty-path", ""),
        ("long-name", str(w / ("n" * 300 + suffix))),
        ("trailing-slash", str(w / "adir2") + "/"),
    ]


def all_cases(ins: Inputs, seed: int = 0, per_file: int = 12) -> list[Case]:
    """Every case, in a fixed order for a given seed."""
    rng = random.Random(seed)
    w = ins.work
    prob = str(ins.files["problem"])
    cases: list[Case] = []

    def add(cmd: str, label: str, argv: list[str], **kw) -> None:
        cases.append(Case(cmd, label, tuple(argv), **kw))

    prob_muts = [(lab, _write(ins, f"problem-{i}.json", data)) for i, (lab, data) in
                 enumerate(json_mutations(ins.files["problem"].read_bytes(), rng, per_file))]
    plan_muts = [(lab, _write(ins, f"plan-{i}.json", data)) for i, (lab, data) in
                 enumerate(json_mutations(ins.files["plan"].read_bytes(), rng, per_file))]
    bk_muts = [(lab, _write(ins, f"bk-{i}.json", data)) for i, (lab, data) in
               enumerate(json_mutations(ins.files["best_known"].read_bytes(), rng, per_file))]
    csv_muts = [(lab, _write(ins, f"board-{i}.csv", data)) for i, (lab, data) in
                enumerate(csv_mutations(ins.files["csv"].read_bytes(), rng, per_file))]
    toml_muts = [(lab, _write(ins, f"matrix-{i}.toml", data))
                 for i, (lab, data) in enumerate(TOML_MUTATIONS)]
    odd_inputs = [("missing-file", str(ins.inp / "nope.json")), ("a-directory", str(ins.inp)),
                  ("dev-null", "/dev/null"), ("empty-path", "")]

    # problems
    for v in ODD_NAMES:
        add("problems", f"filter={v[:12]!r}", ["problems", "--filter", v])

    # simulate
    sim = ["simulate", "--problem", prob, "--plan", "gpipe:2"]
    for lab, p in prob_muts + odd_inputs:
        add("simulate", f"problem:{lab}", ["simulate", "--problem", p, "--plan", "gpipe:2"])
    for v in ODD_NAMES:
        add("simulate", f"problem-name:{v[:12]!r}", ["simulate", "--problem", v, "--plan", "gpipe:2"])
    for lab, p in plan_muts + odd_inputs:
        add("simulate", f"plan:{lab}", ["simulate", "--problem", prob, "--plan", p])
    for spec in ("gpipe:0", "gpipe:-1", "gpipe:x", "gpipe:", "bogus:3", "1f1b:999", "gpipe:1.5",
                 "zb1p:4", ":", "gpipe:2:3"):
        add("simulate", f"plan-spec:{spec}", ["simulate", "--problem", prob, "--plan", spec])
    for v in ODD_NUMBERS:
        add("simulate", f"devices={v}", [*sim[:4], "1f1b:4", "--devices", v])
        add("simulate", f"op-overhead={v}", [*sim, "--op-overhead", v])
    for v in ("0,0", "a", "-1,3", "1", "1,1,1,1,1,1,1,1,1,1,1", ""):
        add("simulate", f"partition={v}", [*sim[:4], "1f1b:4", "--devices", "2", "--partition", v])
    for v in ODD_SIZES:
        add("simulate", f"memory-cap={v}", [*sim, "--memory-cap", v])
    for opt, suf in (("--trace", ".json"), ("--gantt", ".png")):
        for lab, p in odd_out_paths(ins, suf):
            add("simulate", f"{opt[2:]}:{lab}", [*sim, opt, p])

    # schedules
    sch = ["schedules", "--problem", prob, "--devices", "2"]
    for v in ODD_NUMBERS:
        add("schedules", f"devices={v}", ["schedules", "--problem", prob, "--devices", v])
        add("schedules", f"chunks={v}", [*sch, "--chunks", v])
    for v in ("", "bogus", "zb1p,zb1p", ",", "gpipe,,1f1b", "ScheduleGPipe"):
        add("schedules", f"schedules={v!r}", [*sch, "--schedules", v])
    for v in ODD_SIZES:
        add("schedules", f"memory-cap={v}", [*sch, "--memory-cap", v])
    for lab, p in prob_muts[:8]:
        add("schedules", f"problem:{lab}", ["schedules", "--problem", p, "--devices", "2"])

    # plan
    pl = ["plan", "--problem", "sim-s2-b8-s0", "--budget", "evals:200", "--no-progress"]
    for v in ODD_NUMBERS:
        add("plan", f"seed={v}", [*pl, "--seed", v])
    for v in ODD_BUDGETS:
        add("plan", f"budget={v}", ["plan", "--problem", "sim-s2-b8-s0", "--no-progress",
                                     "--budget", v])
    for v in ODD_NAMES:
        add("plan", f"planner={v[:12]!r}", [*pl, "--planner", v])
    for v in ("population=-1", "bogus=1", "population", "=3", "population=abc",
              "population=1e400", "schedule=bogus", "population=2.5", "crossover=2"):
        add("plan", f"set={v}", [*pl, "--set", v])
    for v in ODD_SIZES:
        add("plan", f"memory-cap={v}", [*pl, "--memory-cap", v])
    for lab, p in odd_out_paths(ins, ".json"):
        add("plan", f"out:{lab}", [*pl, "--out", p])
    for lab, p in prob_muts:
        add("plan", f"problem:{lab}", ["plan", "--problem", p, "--budget", "evals:200",
                                        "--no-progress"])

    # bench
    for lab, p in toml_muts:
        add("bench", f"config:{lab}", ["bench", "--config", p, "--out", str(w / "b"),
                                        "--no-progress"])
    bn = ["bench", "--config", str(ins.files["matrix"]), "--out", str(w / "b"), "--no-progress"]
    for v in ODD_NUMBERS:
        add("bench", f"limit={v}", [*bn, "--limit", v])
        add("bench", f"jobs={v}", [*bn, "--jobs", v])
    for v in ("0/0", "3/2", "a/b", "1", "-1/2", "0/2/3", ""):
        add("bench", f"shard={v}", [*bn, "--shard", v])
    for lab, p in odd_out_paths(ins, ""):
        add("bench", f"out:{lab}", ["bench", "--config", str(ins.files["matrix"]), "--out", p,
                                     "--no-progress"])
    for lab, p in odd_inputs:
        add("bench", f"config-path:{lab}", ["bench", "--config", p, "--out", str(w / "b")])

    # report
    for lab, p in csv_muts + odd_inputs:
        add("report", f"in:{lab}", ["report", "--in", p, "--out", str(w / "r"), "--no-plots"])
    for lab, p in odd_out_paths(ins, ""):
        add("report", f"out:{lab}", ["report", "--in", str(ins.files["csv"]), "--out", p,
                                      "--no-plots"])

    # best-known (always on a copy: the default file is the package's own)
    bkc = str(w / "bk.json")
    for lab, p in bk_muts + odd_inputs:
        add("best-known", f"file:{lab}", ["best-known", "check", "--file", p])
    for lab, p in csv_muts + odd_inputs:
        add("best-known", f"from:{lab}", ["best-known", "update", "--from", p, "--file", bkc])
    for v in ("", "shw", "update check"):
        add("best-known", f"action={v!r}", ["best-known", v, "--file", bkc])

    # tune
    tn = ["tune", "--train", "sim-s2-b8-s0", "--heldout", "sim-s3-b6-s0", "--modes", "stash",
          "--seeds", "0", "--budget", "evals:60", "--trials", "1",
          "--storage", f"sqlite:///{w / 't.db'}", "--save", str(w / "t.json"),
          "--report", str(w / "t.md"), "--no-progress"]

    def tune_with(opt: str, value: str) -> list[str]:
        argv = list(tn)
        i = argv.index(opt)
        argv[i + 1] = value
        return argv

    for v in ODD_COUNTS:
        add("tune", f"trials={v}", tune_with("--trials", v))
        add("tune", f"timeout={v}", [*tn, "--timeout", v])
    for v in ("postgresql://u:p@127.0.0.1:1/db", f"sqlite:///{w / 'nope' / 'x.db'}",
              f"sqlite:///{ins.inp / 'text.txt'}", "bogus://x", "", "mysql://127.0.0.1:1/x",
              f"sqlite:///{w / 'adir'}", "sqlite:////dev/full"):
        add("tune", f"storage={v[:30]}", tune_with("--storage", v))
    for v in ODD_BUDGETS:
        add("tune", f"budget={v}", tune_with("--budget", v))
    for v in ODD_NAMES:
        add("tune", f"train={v[:12]!r}", tune_with("--train", v))
    for v in ODD_COUNTS:
        add("tune", f"seeds={v}", tune_with("--seeds", v))
    for lab, p in odd_out_paths(ins, ".json"):
        add("tune", f"save:{lab}", tune_with("--save", p))

    # study
    st = ["study", "--out", str(w / "s"), "--stages", "2", "--batches", "4", "--modes", "stash",
          "--h", "0", "--seeds", "1", "--budget", "evals:60", "--no-gantt", "--no-progress"]

    def study_with(opt: str, value: str) -> list[str]:
        argv = list(st)
        argv[argv.index(opt) + 1] = value
        return argv

    for v in ("2,,3", "0", "-2", "a", "1.5", "", ",", "1e400", "1"):
        add("study", f"stages={v!r}", study_with("--stages", v))
        add("study", f"batches={v!r}", study_with("--batches", v))
    for v in ("2", "-0.1", "nan", "a", "", "0,0", "1e400"):
        add("study", f"h={v!r}", study_with("--h", v))
    for v in ODD_COUNTS:
        add("study", f"seeds={v}", study_with("--seeds", v))
    for v in ODD_NUMBERS:
        add("study", f"jobs={v}", [*st, "--jobs", v])
    for v in ("bogus", "", ","):
        add("study", f"families={v!r}", [*st, "--families", v])
        add("study", f"modes={v!r}", study_with("--modes", v))
    for lab, p in odd_out_paths(ins, ""):
        add("study", f"out:{lab}", study_with("--out", p))

    # execute and profile: torch processes; their odd arguments are in the full set only
    ex = ["execute", "--problem", prob, "--plan", "gpipe:2", "--iters", "1", "--warmup", "0",
          "--no-peer", "--deadline", "60"]
    for opt in ("--iters", "--warmup", "--threads", "--timeout", "--deadline", "--seed"):
        for v in ("-1", "abc", "nan", "1e400"):
            argv = [a for a in ex]
            if opt in argv:
                argv[argv.index(opt) + 1] = v
            else:
                argv += [opt, v]
            add("execute", f"{opt[2:]}={v}", argv, heavy=True)
    for lab, p in plan_muts[:6]:
        add("execute", f"plan:{lab}", ["execute", "--problem", prob, "--plan", p, "--iters", "1",
                                        "--no-peer", "--deadline", "60"], heavy=True)
    for lab, p in odd_out_paths(ins, ".csv")[:5]:
        add("execute", f"csv:{lab}", [*ex, "--csv", p], heavy=True)
    for v in ("bogus", "float13"):
        add("execute", f"dtype={v}", [*ex, "--dtype", v], heavy=True)
    pr = ["profile", "gpt1-mini", "--batch", "2", "--repeats", "1", "--warmup", "0",
          "--no-progress", "--no-locality", "--out", str(w / "p.json")]
    for opt in ("--batch", "--stages", "--repeats", "--threads", "--seq"):
        for v in ("-1", "0", "abc", "1e400"):
            argv = list(pr)
            if opt in argv:
                argv[argv.index(opt) + 1] = v
            else:
                argv += [opt, v]
            add("profile", f"{opt[2:]}={v}", argv, heavy=True)
    for v in ("0,1", "a", "-1,3", "", "1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1,1"):
        add("profile", f"layers-per-stage={v!r}", [*pr, "--layers-per-stage", v], heavy=True)
    for v in ("n_layer=-1", "bogus=1", "n_layer", "n_layer={", "=1"):
        add("profile", f"set={v}", [*pr, "--set", v], heavy=True)
    for v in ("no-such-model", ""):
        add("profile", f"model={v!r}", ["profile", v, "--batch", "2", "--out", str(w / "p.json")],
            heavy=True)
    for lab, p in odd_out_paths(ins, ".json")[:5]:
        argv = list(pr)
        argv[argv.index("--out") + 1] = p
        add("profile", f"out:{lab}", argv, heavy=True)
    return cases


def fast_slice(cases: list[Case], per_command: int = 3, seed: int = 0) -> list[Case]:
    """A deterministic few light cases per sub-command (the fast test tier's share)."""
    rng = random.Random(seed)
    by: dict[str, list[Case]] = {}
    for c in cases:
        if not c.heavy:
            by.setdefault(c.command, []).append(c)
    out: list[Case] = []
    for cmd in sorted(by):
        out += rng.sample(by[cmd], min(per_command, len(by[cmd])))
    return out


def ci_slice(cases: list[Case], fraction: float = 0.25, least: int = 8,
             seed: int = 0) -> list[Case]:
    """A deterministic quarter of every sub-command's cases (at least ``least``): the slow
    tier's share, a few minutes; ``--run`` (or ``UMPIPE_FUZZ=all`` under pytest) runs all."""
    rng = random.Random(seed)
    by: dict[str, list[Case]] = {}
    for c in cases:
        by.setdefault(c.command, []).append(c)
    out: list[Case] = []
    for cmd in sorted(by):
        n = min(len(by[cmd]), max(least, round(fraction * len(by[cmd]))))
        out += rng.sample(by[cmd], n)
    return out


# --- running a case ---------------------------------------------------------------------

_SKIP_DIRS = {".git", "__pycache__", ".pytest_cache", ".mypy_cache", ".ruff_cache", ".tox",
              "build", "dist", ".eggs"}


def snapshot(*roots: Path) -> dict[str, tuple]:
    """Kind, size and content hash (small files) or mtime (large ones) of everything under
    ``roots``; symlinks are recorded as links with their target, not followed."""
    out: dict[str, tuple] = {}
    for root in roots:
        if not root.exists():
            continue
        for dirpath, dirnames, filenames in os.walk(root):
            dirnames[:] = [d for d in dirnames if d not in _SKIP_DIRS
                           and not d.endswith(".egg-info")]
            for name in filenames + [d for d in dirnames
                                     if os.path.islink(os.path.join(dirpath, d))]:
                p = os.path.join(dirpath, name)
                st = os.lstat(p)
                if stat.S_ISLNK(st.st_mode):
                    out[p] = ("link", os.readlink(p))
                elif st.st_size <= 1 << 20:
                    with open(p, "rb") as f:
                        out[p] = ("file", hashlib.sha1(f.read()).hexdigest())
                else:
                    out[p] = ("file", st.st_size, st.st_mtime_ns)
    for dev in DEVICES:
        out[dev] = ("dev", stat.S_IFMT(os.lstat(dev).st_mode))
    return out


@dataclass
class Outcome:
    case: Case
    returncode: int | None
    stderr: str
    problems: list[str]


def _restore_device(dev: str, major: int, minor: int) -> None:
    """Put a character device back (root only; elsewhere the failure is reported anyway)."""
    try:
        os.unlink(dev)
        os.mknod(dev, 0o666 | stat.S_IFCHR, os.makedev(major, minor))
        os.chmod(dev, 0o666)
    except OSError:
        pass


def run_case(case: Case, ins: Inputs, repo_snapshot: Callable[[], dict] | None = None) -> Outcome:
    """Run one case in ``ins.work``; say what went wrong (an empty list: it passed)."""
    before_in = snapshot(ins.inp)
    before_repo = repo_snapshot() if repo_snapshot else None
    env = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONDONTWRITEBYTECODE": "1"}
    problems: list[str] = []
    try:
        r = subprocess.run([sys.executable, "-m", "umpipe_bench", *case.argv], cwd=ins.work,
                           env=env, capture_output=True, text=True, timeout=case.timeout,
                           stdin=subprocess.DEVNULL, check=False, errors="replace")
        rc, err = r.returncode, r.stderr
    except subprocess.TimeoutExpired as exc:
        rc, err = None, (exc.stderr or b"").decode(errors="replace") if isinstance(
            exc.stderr, bytes) else (exc.stderr or "")
        problems.append(f"hung: no exit within {case.timeout:.0f} s")
    if rc is not None and rc not in ALLOWED_EXIT:
        problems.append(f"exit code {rc}")
    if "Traceback (most recent call last)" in err:
        problems.append("traceback on stderr")
    for dev, (major, minor) in DEVICE_NUMBERS.items():
        if not stat.S_ISCHR(os.lstat(dev).st_mode):  # a regression replaced it: put it back
            problems.append(f"replaced the device {dev}")
            _restore_device(dev, major, minor)
    after_in = snapshot(ins.inp)
    if after_in != before_in:
        changed = sorted(k for k in set(before_in) | set(after_in)
                         if before_in.get(k) != after_in.get(k))
        problems.append(f"changed outside the working folder: {changed[:3]}")
    for link, target in LINKS.items():
        if not (ins.work / link).is_symlink():
            problems.append(f"replaced the symlink {link} (outputs follow symlinks)")
            (ins.work / link).unlink(missing_ok=True)
            os.symlink(ins.work / target, ins.work / link)
    if before_repo is not None:
        after_repo = repo_snapshot()
        if after_repo != before_repo:
            changed = sorted(k for k in set(before_repo) | set(after_repo)
                             if before_repo.get(k) != after_repo.get(k))
            problems.append(f"changed the repository: {changed[:3]}")
    return Outcome(case, rc, err, problems)


def repo_snapshotter() -> Callable[[], dict]:
    return lambda: snapshot(ROOT / "umpipe_bench", ROOT / "results", ROOT / "docs")


def main(argv: list[str]) -> int:
    import tempfile

    with tempfile.TemporaryDirectory(prefix="umpipe-fuzz-") as tmp:
        ins = make_inputs(Path(tmp))
        cases = all_cases(ins)
        fast = fast_slice(cases)
        if "--run" not in argv:
            counts: dict[str, list[int]] = {}
            for c in cases:
                counts.setdefault(c.command, [0, 0])[1] += 1
            for c in fast:
                counts[c.command][0] += 1
            for c in ci_slice(cases):
                counts[c.command].append(1)
            print(f"{'command':<12} {'fast':>5} {'CI':>5} {'all':>5}")
            for cmd, (f, a, *ci) in sorted(counts.items()):
                print(f"{cmd:<12} {f:>5} {len(ci):>5} {a:>5}")
            print(f"{'total':<12} {len(fast):>5} {len(ci_slice(cases)):>5} {len(cases):>5}")
            return 0
        chosen = fast if "--fast" in argv else cases
        only = [a.split("=", 1)[1] for a in argv if a.startswith("--only=")]
        if only:
            chosen = [c for c in chosen if c.command in only]
        if "--no-devices" in argv:
            chosen = [c for c in chosen if "dev-" not in c.label]
        if "--light" in argv:
            chosen = [c for c in chosen if not c.heavy]
        snap = repo_snapshotter()
        failed = 0
        for i, c in enumerate(chosen, 1):
            o = run_case(c, ins, snap)
            status = "ok" if not o.problems else "FAIL " + "; ".join(o.problems)
            print(f"[{i}/{len(chosen)}] {c.id} rc={o.returncode} {status}", flush=True)
            if o.problems:
                failed += 1
                tail = o.stderr.strip().splitlines()[-1:] if o.stderr.strip() else []
                print(f"    argv: {' '.join(c.argv)[:300]}\n    stderr: {tail}", flush=True)
        print(f"{failed} of {len(chosen)} cases failed")
        return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
