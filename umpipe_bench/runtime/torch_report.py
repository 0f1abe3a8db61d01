"""The summary and pages of measured runs of torch.distributed.pipelining's schedules
(docs/TORCH-SCHEDULES.md §7): predicted against measured.

:func:`summarize` gives per entry of one run the median over rounds, its percentile-bootstrap
95 % interval (:mod:`.stats`) and the prediction error, and over the entries Spearman's rank
correlation; :func:`report` writes that run's page. :func:`combine` makes one page (and a
scatter) over several runs of several workloads, each prediction made as profiled, with the
per-action overhead fitted to the workload's calibration run (:mod:`.torch_entries`), and on
the runtime-calibrated problem (:mod:`.calibration`); :func:`gain` one page over launches that
ran chunk plans beside torch's schedules: each plan against the fastest torch schedule as
measured.

Imports no torch (matplotlib only for the scatter).
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

from ..problem import atomic_write_text
from ..registry import get_problem
from .allocator import UNRECORDED
from .calibration import runtime_model
from .errors import PlanRefused
from .stats import bootstrap_median, paired_ratios, spearman
from .torch_entries import D, fit_overhead, predict_rows, predicted_entries

__all__ = ["combine", "gain", "report", "summarize"]


def summarize(result: dict[str, Any]) -> dict[str, Any]:
    """Per entry: median, bootstrap 95 % interval, prediction error; over entries: Spearman."""
    rows = []
    for e in result["entries"]:
        iv = bootstrap_median(e["times"])
        row = {"label": e["label"], "torch_class": e["torch_class"], "M": e["M"],
               "partition": e["partition"], "v": e["v"], "median": iv.median, "low": iv.low,
               "high": iv.high, "n": iv.n, "T_pred": e["T_pred"]}
        if e["T_pred"] is not None:
            row["rel_error"] = abs(e["T_pred"] - iv.median) / iv.median
        rows.append(row)
    pred = [r for r in rows if r["T_pred"] is not None]
    out: dict[str, Any] = {"rows": rows, "n_predicted": len(pred)}
    if len(pred) >= 2:
        out["spearman"] = spearman([r["T_pred"] for r in pred], [r["median"] for r in pred])
    if pred:
        out["median_rel_error"] = float(np.median([r["rel_error"] for r in pred]))
    return out


def report(command: str, meta: dict[str, Any], summary: dict[str, Any]) -> str:
    """The markdown report, the command that regenerates it first."""
    w = meta["workload"]
    lines = [
        "# torch.distributed.pipelining schedules, measured",
        "",
        f"Command: `{command}`",
        "",
        f"Workload `{w['name']}`: model `{w['model']}`, config `{json.dumps(w['config'])}`, "
        f"B = {w['B']}, D = {D} processes (gloo), {meta['threads']} thread(s) per process, "
        f"{meta['dtype']}, optimizer {meta['optimizer']}. {meta['rounds']} rounds after "
        f"{meta['warmup']} warm-up rounds; each round runs every entry once in a rotating order; "
        "an iteration is timed from a barrier to the end of the slowest rank's step and "
        "optimizer update. Interval: percentile bootstrap (95 %) of the median over rounds.",
        "",
        f"Host {meta['host']}, torch {meta['torch']}, {meta['date']}; load average "
        f"{meta['load_before']} before, {meta['load_after']} after; peak memory per process "
        f"{', '.join(f'{x:.0f}' for x in meta['peak_rss_mib'])} MiB; C allocator "
        f"{meta.get('malloc', UNRECORDED)} (docs/EXECUTE.md \"Allocator\").",
        "",
        "| entry | torch class | M | partition | measured median (ms) | 95 % interval (ms) "
        "| T_pred (ms) | \\|pred-meas\\|/meas |",
        "|---|---|---:|---|---:|---|---:|---:|",
    ]
    for r in sorted(summary["rows"], key=lambda r: r["median"]):
        pred = "-" if r["T_pred"] is None else f"{r['T_pred'] * 1e3:.1f}"
        err = "-" if r["T_pred"] is None else f"{r['rel_error'] * 100:.1f} %"
        lines.append(
            f"| {r['label']} | {r['torch_class'] or 'chunk plan, our runtime'} | "
            f"{r['M'] or '-'} | {r['partition']} | "
            f"{r['median'] * 1e3:.1f} | [{r['low'] * 1e3:.1f}, {r['high'] * 1e3:.1f}] | "
            f"{pred} | {err} |")
    lines.append("")
    n = summary["n_predicted"]
    if "spearman" in summary:
        lines.append(f"Spearman rank correlation of predicted vs measured medians over {n} "
                     f"entries: {summary['spearman']:.3f}.")
    if "median_rel_error" in summary:
        lines.append(f"Median relative error |pred - meas| / meas over {n} entries: "
                     f"{summary['median_rel_error'] * 100:.1f} %.")
    if n == 0:
        lines.append("No entry carries a prediction (T_pred).")
    return "\n".join(lines) + "\n"


def _launch_rows(runs: list[dict[str, Any]]) -> tuple[list[dict[str, Any]], list[list[float]]]:
    """The entries measured in every launch of one workload, and per entry the launch medians."""
    labels = [r["label"] for r in runs[0]["summary"]["rows"]]
    by_label = [{r["label"]: r for r in run["summary"]["rows"]} for run in runs]
    keep = [lab for lab in labels if all(lab in b for b in by_label)]
    rows = [by_label[0][lab] for lab in keep]
    return rows, [[b[lab]["median"] for b in by_label] for lab in keep]


#: marker and colour of each model on the scatter
_STYLE = {"as profiled": ("o", "C0"), "with overhead": ("s", "C1"),
          "runtime-calibrated": ("^", "C2")}


def combine(paths: list[str], report_path: str, png: str | None, command: str) -> int:
    """One page over measured workloads (``X.run*.json`` files written by ``--out``; several
    launches of one workload in one folder are combined; a sitting's folder below the profile's,
    ``scripts/torch_schedules_sitting.sh``, is a group of its own, titled with the folder).

    An entry's measured time is the median over launches of its per-launch median (launches of
    the same entries differ by more than the rounds within one; the page shows each launch's
    rank correlation too). For each workload the simulator predicts every measured entry: as
    profiled, with the per-action overhead fitted to the workload's calibration run
    ``X.calrun.json`` beside it (GPipe at every M, :func:`calibration_entries`; no entry of the
    schedules' runs), and, where ``X.runtime.json`` lies beside the runs, on that
    runtime-calibrated problem with its message charge (``scripts/runtime_calibration.py``,
    :mod:`.calibration`; no entry of the schedules' runs either). Per model: Spearman's rank
    correlation of predicted and measured times and the median relative error, over every entry
    and over the entries that model itself picked (each schedule's best, the ``--predict``
    entries); then every entry, and a scatter.
    """
    import re

    from umpipe_bench.runtime.stats import spearman as rho

    groups: dict[tuple[str, str], list[tuple[str, dict[str, Any]]]] = {}
    for path in paths:
        run = json.loads(Path(path).read_text(encoding="utf-8"))
        groups.setdefault((str(Path(path).parent), run["workload"]["name"]), []).append(
            (path, run))
    out = []
    for (folder, name), items in groups.items():
        runs = [run for _, run in items]
        first = items[0][0]
        # the workload's profile, if kept beside the runs or, for a sitting's folder, one up
        beside = Path(folder) / f"{name}.json"
        if not beside.exists() and (Path(folder).parent / f"{name}.json").exists():
            beside = Path(folder).parent / f"{name}.json"
            title = f"{name} ({Path(folder).name})"
        else:
            title = name
        problem = str(beside) if beside.exists() else name
        cal_path = Path(re.sub(r"\.run\d*\.json$", ".calrun.json", str(first)))
        c = fit_overhead(problem, str(cal_path)) if cal_path.exists() else None
        rows, per_launch = _launch_rows(runs)
        meas = [float(np.median(x)) for x in per_launch]
        runtime = Path(first).parent / f"{name}.runtime.json"
        models = {"as profiled": (problem, 0.0),
                  **({"with overhead": (problem, c)} if c is not None else {}),
                  **({"runtime-calibrated": (str(runtime), 0.0)} if runtime.exists() else {})}
        preds = {k: predict_rows(prob, rows, v) for k, (prob, v) in models.items()}
        picks = {}
        for k, (prob, v) in models.items():
            chosen = predicted_entries(prob, "stash", v)["entries"]
            keys = {(e["torch_class"], e["M"], tuple(e["partition"])) for e in chosen}
            picks[k] = [i for i, r in enumerate(rows)
                        if (r["torch_class"], r["M"], tuple(r["partition"])) in keys]
        out.append((title, runs, c, rows, per_launch, meas, models, preds, picks))
    lines = ["# torch's pipeline schedules: predicted against measured", "",
             f"Regenerate the page: `{command}`. The runs: `python "
             "scripts/measure_torch_schedules.py ENTRIES --rounds R --warmup W --out "
             "X.runN.json`, three launches per workload (each workload's section lists its "
             "launches' commands), on the entries files in `results/real/torch-schedules/` "
             "made by `--predict PROBLEM [--op-overhead S]` (`*.pred.json`: the picks as "
             "profiled; `*.union.json`: the picks as profiled and with overhead, merged; "
             "`*.runtime-pred.json`: the runtime-calibrated picks, `--predict X.runtime.json`; "
             "`*.all.json`: `--merge` of those) and, for the workloads with a **with "
             "overhead** row, `--calibrate PROBLEM` (`*.cal.json`, run as `--out "
             "X.calrun.json`); `X.runtime.json` is the problem `scripts/runtime_calibration.py "
             "fit` writes (docs/TORCH-SCHEDULES.md §7a gives the commands).", "",
             "Two CPU processes (gloo, one thread each), torch.distributed.pipelining running "
             "each schedule itself; every entry of a workload in one launch, interleaved "
             "rounds; an entry's time is the median over launches of its per-launch median. "
             "Predictions: the device simulator on the workload's one-layer-per-stage profile "
             "(beside the runs), **as profiled**, and **with overhead**: plus a fixed time per "
             "action, fitted (least squares on log times) to a separate calibration run of "
             "GPipe at every M; **runtime-calibrated**: every layer's F, B, I and W cost "
             "decomposed (least squares) from their times inside torch's runtime in a designed "
             "calibration run (GPipe and ZB1P over every split point, M = 2 and 4; none of the "
             "runs below), plus a CPU charge on both ends of every cross-device message, a + b * "
             "bytes, fitted to two exchange measurements (results/real/torch-schedule-ops/ and "
             "results/real/runtime-calibration/exchange.json). A workload whose title carries a "
             "date is one sitting of `scripts/torch_schedules_sitting.sh DATE WORKLOAD ROUNDS` "
             "(files in `results/real/torch-schedules/DATE/` and "
             "`results/real/runtime-calibration/DATE/`): the runtime calibration with an "
             "exchange measurement of its own, the calibrated model's picks and three launches "
             "of every entry, back to back; its runtime-calibrated model is that sitting's. "
             "Each section ends with the measurement's own agreement: Spearman of one launch's "
             "entry times against another's.", "",
             "| workload | model | overhead per action | message charge per end | Spearman, "
             "all entries | Spearman, the model's own picks | Spearman per launch (all "
             "entries) | Spearman per launch (own picks) | median \\|pred-meas\\|/meas |",
             "|---|---|---:|---|---:|---:|---|---|---:|"]
    for name, _runs, _c, rows, per_launch, meas, models, preds, picks in out:
        for k, (prob, v) in models.items():
            p = preds[k]
            own = picks[k]
            ma, mb = runtime_model(get_problem(prob))
            charge = "off" if (ma, mb) == (0.0, 0.0) else \
                f"{ma * 1e3:.2f} ms + {mb * 1e9:.2f} ms/MB"
            err = float(np.median([abs(a - b) / b for a, b in zip(p, meas)]))
            launches = ", ".join(f"{rho(p, [x[i] for x in per_launch]):.2f}"
                                 for i in range(len(per_launch[0])))
            own_launches = ", ".join(
                f"{rho([p[j] for j in own], [per_launch[j][i] for j in own]):.2f}"
                for i in range(len(per_launch[0])))
            lines.append(
                f"| {name} | {k} | {v * 1e3:.2f} ms | {charge} | {rho(p, meas):.3f} "
                f"({len(rows)}) | "
                f"{rho([p[i] for i in own], [meas[i] for i in own]):.3f} ({len(own)}) | "
                f"{launches} | {own_launches} | {err * 100:.1f} % |")
    for name, runs, _c, rows, per_launch, meas, models, preds, picks in out:
        names = list(models)
        lines += ["", f"## {name}", ""]
        for run in runs:
            lines.append(f"- `{run['command']}` ({run['date']}; load average "
                         f"{run['load_before']} before, {run['load_after']} after; C allocator "
                         f"{run.get('malloc', UNRECORDED)})")
        lines += ["", "| entry | measured (ms) | per launch (ms) | "
                  + " | ".join(f"T {k} (ms)" for k in names) + " | picked by |",
                  "|---|---:|---|" + "---:|" * len(names) + "---|"]
        for i in sorted(range(len(rows)), key=lambda i: meas[i]):
            by = ", ".join(k for k in names if i in picks[k]) or "-"
            lines.append(f"| {rows[i]['label']} | {meas[i] * 1e3:.1f} | "
                         + ", ".join(f"{x * 1e3:.1f}" for x in per_launch[i]) + " | "
                         + " | ".join(f"{preds[k][i] * 1e3:.1f}" for k in names) + f" | {by} |")
        n_l = len(per_launch[0])
        pairs = [(i, j) for i in range(n_l) for j in range(i + 1, n_l)]
        if pairs:
            lines += ["", "Launch against launch (Spearman over all entries): " + ", ".join(
                f"{i + 1}-{j + 1} {rho([x[i] for x in per_launch], [x[j] for x in per_launch]):.2f}"
                for i, j in pairs)]
    if png:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt

        ncol = min(4, len(out))
        nrow = -(-len(out) // ncol)
        fig, axes = plt.subplots(nrow, ncol, figsize=(5.2 * ncol, 4.8 * nrow), squeeze=False)
        for ax in axes.flat[len(out):]:
            ax.set_visible(False)
        for ax, (name, _r, _c, rows, per_launch, meas, models, preds, _p) in zip(axes.flat, out):
            ys = [x * 1e3 for x in meas]
            err = [[(m - min(x)) * 1e3 for m, x in zip(meas, per_launch)],
                   [(max(x) - m) * 1e3 for m, x in zip(meas, per_launch)]]
            allv = list(ys)
            for k in models:  # one marker and colour per model on every panel
                marker, colour = _STYLE[k]
                xs = [x * 1e3 for x in preds[k]]
                allv += xs
                ax.errorbar(xs, ys, yerr=err, fmt=marker, color=colour, capsize=2, label=k,
                            mfc="none" if marker == "o" else None)
            for x, y, r in zip(preds[list(models)[-1]], ys, rows):
                ax.annotate(r["label"].split(":")[0], (x * 1e3, y), fontsize=6,
                            textcoords="offset points", xytext=(3, 2))
            lo, hi = min(allv) * 0.95, max(allv) * 1.05
            ax.plot([lo, hi], [lo, hi], "k--", lw=0.8)
            ax.set_title(f"{name} (bars: range over launches)", fontsize=9)
            ax.set_xlabel("predicted T (ms)")
            ax.set_ylabel("measured T (ms)")
            ax.legend(fontsize=7)
        fig.tight_layout()
        fig.savefig(png, dpi=110)
        lines += ["", f"![predicted vs measured]({Path(png).name})"]
    atomic_write_text(report_path, "\n".join(lines) + "\n")
    print(f"wrote {report_path}" + (f" and {png}" if png else ""), file=sys.stderr)
    return 0


def gain(paths: list[str], report_path: str, command: str, intro: str | None = None) -> int:
    """One page over launches of the same entries, chunk plans (our runtime) among torch's
    schedules (``--out`` files of ``scripts/measure_torch_schedules.py``).

    An entry's rounds are pooled over the launches: its time is their median, with a
    percentile-bootstrap 95 % interval, beside each launch's median. The fastest torch schedule
    *as measured* is the torch entry of the smallest pooled median; each chunk plan's speedup
    over it is the median of the per-round ratios ``T_torch / T_plan`` (both ran in the same
    round of the same launch), pooled over the launches, with its bootstrap interval, and the
    same over every other torch entry. ``intro`` (a markdown file) goes after the title."""
    runs = [json.loads(Path(p).read_text(encoding="utf-8")) for p in paths]
    labels = [e["label"] for e in runs[0]["result"]["entries"]]
    for path, run in zip(paths, runs):
        got = [e["label"] for e in run["result"]["entries"]]
        if sorted(got) != sorted(labels) or run["workload"] != runs[0]["workload"]:
            raise PlanRefused(f"--gain {path}: not a launch of the entries and workload of "
                              f"{paths[0]}")
    by = [{e["label"]: e for e in run["result"]["entries"]} for run in runs]
    times = {lab: [t for b in by for t in b[lab]["times"]] for lab in labels}
    iv = {lab: bootstrap_median(times[lab]) for lab in labels}
    first = by[0]
    plans = [lab for lab in labels if first[lab]["torch_class"] is None]
    torch_ = [lab for lab in labels if first[lab]["torch_class"] is not None]
    if not plans or not torch_:
        raise PlanRefused(f"--gain {paths[0]}: expected chunk plan entries and torch entries "
                          "in one launch")
    fastest = min(torch_, key=lambda lab: iv[lab].median)

    def ratio(base: str, plan: str) -> Any:
        return bootstrap_median(np.concatenate([paired_ratios(b[base]["times"], b[plan]["times"])
                                                for b in by]))

    w, r0 = runs[0]["workload"], runs[0]
    lines = ["# A planned chunk plan against torch's schedules, measured", ""]
    if intro:
        lines += [Path(intro).read_text(encoding="utf-8").rstrip(), ""]
    lines += [
        f"Regenerate the page: `{command}`. The launches (each one runs every entry, in "
        "rotating rounds):", ""]
    for run in runs:
        lines.append(f"- `{run['command']}` ({run['date']}; load average {run['load_before']} "
                     f"before, {run['load_after']} after; {run['result']['rounds']} rounds "
                     f"after {run['result']['warmup']} warm-up; C allocator "
                     f"{run.get('malloc', UNRECORDED)})")
    lines += [
        "", f"Workload `{w['name']}`: model `{w['model']}`, config `{json.dumps(w['config'])}`, "
        f"B = {w['B']}; D = {D} processes (gloo), {r0['threads']} thread(s) each, "
        f"{r0['dtype']}, optimizer {r0['optimizer']}, torch {r0['torch']}. torch's schedules "
        "run by torch.distributed.pipelining, the chunk plans by our runtime, in the same "
        "launches and rounds on the same parameters and batch. An iteration: from a barrier "
        "to the end of the slowest rank's step and optimizer update. Measured: the median "
        f"over all {len(times[labels[0]])} rounds of the {len(runs)} launches, with a "
        "percentile-bootstrap 95 % interval; per rank: the median of each rank's own time "
        "(barrier to the end of its step and update); predicted: the device simulator on the "
        "workload's per-layer profile.", "",
        "| entry | engine | predicted (ms) | measured (ms) | 95 % interval (ms) | per launch "
        "(ms) | per rank (ms) | measured / predicted |", "|---|---|---:|---:|---|---|---|---:|"]
    for lab in sorted(labels, key=lambda x: iv[x].median):
        e, i = first[lab], iv[lab]
        pred = e["T_pred"]
        engine = "our runtime" if e["torch_class"] is None else e["torch_class"]
        per = ", ".join(f"{float(np.median(b[lab]['times'])) * 1e3:.1f}" for b in by)
        ranks = "-"
        if all("rank_times" in b[lab] for b in by):  # each rank's own step, pooled rounds
            ranks = ", ".join(
                f"{float(np.median([t for b in by for t in b[lab]['rank_times'][r]])) * 1e3:.1f}"
                for r in range(len(e["rank_times"])))
        lines.append(
            f"| {lab} | {engine} | {'-' if pred is None else f'{pred * 1e3:.1f}'} | "
            f"{i.median * 1e3:.1f} | [{i.low * 1e3:.1f}, {i.high * 1e3:.1f}] | {per} | "
            f"{ranks} | {'-' if pred is None else f'{i.median / pred:.3f}'} |")
    lines += ["", "Speedup of each chunk plan, measured: the median of the per-round ratios "
              "(torch entry / plan, same round), pooled over the launches, with its bootstrap "
              "95 % interval; predicted: the ratio of the device simulator's T. The fastest "
              f"torch schedule as measured: **{fastest}**.", "",
              "| plan | vs | measured speedup | 95 % interval | per launch | predicted |",
              "|---|---|---:|---|---|---:|"]
    for plan in plans:
        for base in sorted(torch_, key=lambda x: iv[x].median):
            r = ratio(base, plan)
            per = ", ".join(
                f"{float(np.median(paired_ratios(b[base]['times'], b[plan]['times']))):.3f}"
                for b in by)
            p_b, p_p = first[base]["T_pred"], first[plan]["T_pred"]
            pred = "-" if p_b is None or p_p is None else f"{p_b / p_p:.3f}"
            star = "**" if base == fastest else ""
            lines.append(f"| {plan} | {star}{base}{star} | {star}{r.median:.3f}{star} | "
                         f"[{r.low:.3f}, {r.high:.3f}] | {per} | {pred} |")
    atomic_write_text(report_path, "\n".join(lines) + "\n")
    print(f"wrote {report_path}", file=sys.stderr)
    return 0
