#!/usr/bin/env python
"""How far the runtime-calibrated model misses each of torch's schedules, sitting by sitting,
and whether a correction per schedule learned from other sittings would rank the picks
(docs/TORCH-SCHEDULES.md §7b).

    python scripts/schedule_class_bias.py SITTING_DIR... [--workloads W,...]
    python scripts/schedule_class_bias.py --probes SITTING_DIR...

SITTING_DIR: folders of ``scripts/torch_schedules_sitting.sh`` (``results/real/torch-schedules/
SITTING``), each holding per workload ``W.runtime.json`` (the calibrated problem),
``W.runtime-pred.json`` (its picks) and the launches ``W.run1.json`` to ``W.run3.json``. For every
workload in every sitting: each pick's measured time (median over launches of the per-launch
medians) over the model's time without class factors, as a log ratio less the sitting's median
over the picks (what is left of a schedule's miss once the sitting's overall scale is taken
out); then, per sitting, Spearman of the picks' predicted and measured times as predicted and
with each schedule's mean residual over the *other* sittings taken out (leave one sitting out:
no sitting's correction comes from its own launches), and the measurement's own agreement: each
launch's pick times against the median of the other launches'. Then, over all the sittings
given, per workload: in how many the picks rank at 0.8 or more, and the workload's pooled rank
correlation: each schedule's median over the sittings of its pick's predicted (and measured)
time over the sitting's median pick, ranked, with an interval from resampling the sittings
(:func:`pooled`, :func:`pooled_bootstrap`).

``--probes``: for sittings whose calibration ran the schedule probes (``--probes`` of
``scripts/torch_schedules_sitting.sh``), the calibration refitted with and without the probes'
actions (``scripts/runtime_calibration.py fit`` on the entries file as run and with the probes
left out, into a temporary folder), and each fit's Spearman over every measured entry of the
sitting's launches and its median error; then each probed schedule's factor (its probes'
measured over simulated iteration time in the calibration run, over GPipe's) and the picks'
Spearman with every prediction times its schedule's factor.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "scripts"))

from torch_schedule_ops import _label  # noqa: E402  (the entry label the launches use)

#: Resamples of the sittings for the pooled rank correlation's interval.
BOOTSTRAP = 2000

WORKLOADS = ("gpt1-mini-b16-l14", "gpt1-mini-b16-seq64-l14", "vgg16-mini-b16-l16",
             "vgg16-mini-b16-px64-l16")


def _sitting(folder: Path, w: str) -> tuple[list[str], np.ndarray, np.ndarray, np.ndarray] | None:
    """The picks of workload ``w`` in one sitting: schedules, predictions, measured times and
    each launch's medians (launch by pick)."""
    from umpipe_bench.runtime.torch_entries import predict_rows

    pred_file = folder / f"{w}.runtime-pred.json"
    runs = sorted(folder.glob(f"{w}.run[0-9]*.json"))
    if not pred_file.exists() or not runs:
        return None
    picks = json.loads(pred_file.read_text(encoding="utf-8"))["entries"]
    launches = [{r["label"]: r["median"] for r in
                 json.loads(p.read_text(encoding="utf-8"))["summary"]["rows"]} for p in runs]
    labels = [_label(e) for e in picks]
    meas = np.median([[x[lab] for lab in labels] for x in launches], axis=0)
    T = np.array(predict_rows(str(folder / f"{w}.runtime.json"), picks, 0.0))
    per = np.array([[x[lab] for lab in labels] for x in launches])
    return [e["schedule"] for e in picks], T, meas, per


def pooled(data: dict[str, tuple]) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Over the sittings of one workload (``data``: sitting -> :func:`_sitting`'s tuple): per
    schedule, the median over the sittings of its pick's log time less the sitting's median
    log time over the picks, predicted and measured (each sitting's overall scale taken out;
    the picks' M and partition may differ between sittings)."""
    pred: dict[str, list[float]] = {}
    meas: dict[str, list[float]] = {}
    for sched, T, m, _ in data.values():
        lt, lm = np.log(np.asarray(T, float)), np.log(np.asarray(m, float))
        for k, a, b in zip(sched, lt - np.median(lt), lm - np.median(lm)):
            pred.setdefault(k, []).append(float(a))
            meas.setdefault(k, []).append(float(b))
    names = sorted(pred)
    return (names, np.array([np.median(pred[k]) for k in names]),
            np.array([np.median(meas[k]) for k in names]))


def pooled_bootstrap(data: dict[str, tuple], n: int = BOOTSTRAP,
                     seed: int = 0) -> np.ndarray:
    """The Spearman of :func:`pooled` over ``n`` resamples of the sittings (with replacement,
    as many as there are; ``numpy.random.default_rng(seed)``)."""
    from umpipe_bench.runtime.stats import spearman

    keys = list(data)
    rng = np.random.default_rng(seed)
    out = np.empty(n)
    for i in range(n):
        pick = rng.integers(0, len(keys), len(keys))
        _, p, m = pooled({j: data[keys[k]] for j, k in enumerate(pick)})
        out[i] = spearman(list(p), list(m))
    return out


def _probes_ab(folder: Path, w: str) -> str | None:
    """One workload of a sitting: ``with probes: Spearman, error | without: ...``."""
    import subprocess
    import tempfile

    from umpipe_bench.registry import get_problem
    from umpipe_bench.runtime.calibration import schedule_probes
    from umpipe_bench.runtime.stats import spearman
    from umpipe_bench.runtime.torch_entries import predict_rows

    cal_dir = ROOT / "results/real/runtime-calibration" / folder.name
    cal_file = cal_dir / f"{w}.cal.json"
    runs = sorted(folder.glob(f"{w}.run[0-9]*.json"))
    if not cal_file.exists() or not runs:
        return None
    cal = json.loads(cal_file.read_text(encoding="utf-8"))
    P = get_problem(cal["workload"])
    probes = {_label(e) for e in schedule_probes(P.S, P.B)}
    if not any(_label(e) in probes for e in cal["entries"]):
        return f"{w}: its calibration ran no probes"
    launches = [json.loads(p.read_text(encoding="utf-8"))["summary"]["rows"] for p in runs]
    rows = launches[0]
    meas = np.median([[{r["label"]: r["median"] for r in x}[r0["label"]] for r0 in rows]
                      for x in launches], axis=0)
    out = [w]
    with tempfile.TemporaryDirectory() as tmp:
        for name, keep in (("with probes", True), ("without", False)):
            spec = dict(cal, entries=[e for e in cal["entries"]
                                      if keep or _label(e) not in probes])
            f = Path(tmp, "cal.json")
            f.write_text(json.dumps(spec), encoding="utf-8")
            prob = Path(tmp, f"{w}.runtime.json")
            subprocess.run([sys.executable, str(ROOT / "scripts/runtime_calibration.py"), "fit",
                            str(f), "--ops", str(cal_dir / w), "--exchange",
                            str(cal_dir / w / "exchange.json"), "--out", str(prob)],
                           check=True, capture_output=True)
            pred = predict_rows(str(prob), rows, 0.0)
            err = float(np.median([abs(a - b) / b for a, b in zip(pred, meas)]))
            out.append(f"{name}: Spearman {spearman(list(pred), list(meas)):.3f} over "
                       f"{len(rows)} entries, median error {100 * err:.1f} %")
    factors = _probe_factors(cal, P, cal_dir / w, folder / f"{w}.runtime.json")
    picks = json.loads((folder / f"{w}.runtime-pred.json").read_text(encoding="utf-8"))["entries"]
    pm = np.median([[{r["label"]: r["median"] for r in x}[_label(e)] for e in picks]
                    for x in launches], axis=0)
    pt = np.array(predict_rows(str(folder / f"{w}.runtime.json"), picks, 0.0))
    pf = pt * np.array([factors.get(e["schedule"], 1.0) for e in picks])
    out.append("probes' factors " + ", ".join(f"{k} {v:.3f}" for k, v in sorted(factors.items()))
               + f"; picks ranked {spearman(list(pt), list(pm)):.3f} as predicted, "
               f"{spearman(list(pf), list(pm)):.3f} times the factors")
    return " | ".join(out)


def _probe_factors(cal: dict, P, ops_dir: Path, runtime: Path) -> dict[str, float]:
    """Per probed schedule: the median over its probes of the calibration run's iteration time
    (per iteration the later rank's wall, median over iterations) over the calibrated model's,
    over the same ratio's median over the GPipe entries."""
    from umpipe_bench.runtime.calibration import schedule_probes
    from umpipe_bench.runtime.torch_entries import predict_rows

    ranks = [json.loads((ops_dir / f"ops.r{k}.json").read_text(encoding="utf-8"))
             for k in (0, 1)]
    probes = {_label(e) for e in schedule_probes(P.S, P.B)}
    timed = [e for e in cal["entries"] if e["schedule"] == "gpipe" or _label(e) in probes]
    sim = predict_rows(str(runtime), timed, 0.0)
    ratios: dict[str, list[float]] = {}
    for e, t in zip(timed, sim):
        its = [r.get(_label(e)) or [] for r in ranks]
        n = min(len(x) for x in its)
        if n:
            wall = float(np.median([max(x[i]["wall"] for x in its) for i in range(n)]))
            ratios.setdefault(e["schedule"], []).append(wall / t)
    ref = float(np.median(ratios.pop("gpipe")))
    return {k: float(np.median(v)) / ref for k, v in ratios.items()}


def main(argv: list[str] | None = None) -> int:
    from umpipe_bench.runtime.stats import spearman

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    ap.add_argument("sittings", nargs="+", help="sitting folders")
    ap.add_argument("--workloads", default=",".join(WORKLOADS))
    ap.add_argument("--probes", action="store_true", help="instead: the calibration refitted "
                    "with and without the schedule probes' actions")
    a = ap.parse_args(argv)
    folders = [Path(s) for s in a.sittings]
    for f in folders:
        if not f.is_dir():
            print(f"error: SITTING_DIR: no folder {f}", file=sys.stderr)
            return 2
    names = [f.name for f in folders]
    if a.probes:
        for f in folders:
            for w in a.workloads.split(","):
                line = _probes_ab(f, w)
                if line:
                    print(f"- {f.name} {line}")
        return 0
    print("# torch's schedules: the runtime-calibrated model's picks, sitting by sitting\n\n"
          f"`python scripts/schedule_class_bias.py` over {len(folders)} sittings: "
          + ", ".join(names) + ".\n")
    for w in a.workloads.split(","):
        data = {f.name: _sitting(f, w) for f in folders}
        data = {k: v for k, v in data.items() if v is not None}
        if not data:
            continue
        resid: dict[str, dict[str, float]] = {}
        for s, (sched, T, meas, _) in data.items():
            r = np.log(meas / T)
            r -= np.median(r)
            for k, x in zip(sched, r):
                resid.setdefault(k, {})[s] = float(x)
        print(f"## {w}\n")
        print("measured over predicted, less the sitting's median (per cent):\n")
        print("| schedule | " + " | ".join(n for n in names if n in data) + " |")
        print("|---|" + "---:|" * len(data))
        for k in sorted(resid):
            print(f"| {k} | " + " | ".join(
                f"{100 * (np.exp(resid[k][n]) - 1):+.1f}" if n in resid[k] else "-"
                for n in names if n in data) + " |")
        print("\nSpearman of the picks, as predicted -> with the other sittings' mean residual "
              "per schedule; the measurement's own: each launch against the median of the "
              "others; the picks' spread (slowest over fastest, measured):\n")
        rho = []
        for s, (sched, T, meas, per) in data.items():
            rho.append(spearman(list(T), list(meas)))
            corr = []
            for k in sched:
                other = [v for n, v in resid[k].items() if n != s]
                corr.append(float(np.mean(other)) if other else 0.0)
            Tc = T * np.exp(np.array(corr))
            own = [spearman(list(per[i]), list(np.median(np.delete(per, i, 0), axis=0)))
                   for i in range(len(per))] if len(per) > 1 else []
            print(f"- {s}: {rho[-1]:.3f} -> "
                  f"{spearman(list(Tc), list(meas)):.3f}; launches "
                  + ", ".join(f"{x:.2f}" for x in own)
                  + f"; spread {100 * (meas.max() / meas.min() - 1):.1f} %")
        if len(data) > 1:
            _, p, m = pooled(data)
            boot = pooled_bootstrap(data)
            lo, hi = np.percentile(boot, [2.5, 97.5])
            print(f"\nOver the {len(data)} sittings: the picks rank at 0.8 or more in "
                  f"{sum(r >= 0.8 for r in rho)} (median {np.median(rho):.3f}); each "
                  "schedule's median over the sittings of its pick's time over the sitting's "
                  f"median pick ranks at {spearman(list(p), list(m)):.3f} (resampling the "
                  f"sittings, {BOOTSTRAP} times: {lo:.3f} to {hi:.3f}, 2.5th to 97.5th "
                  f"percentile; 0.8 or more in {100 * np.mean(boot >= 0.8):.0f} %)")
        print()
    return 0


if __name__ == "__main__":
    sys.exit(main())
