"""``umpipe-bench tune``: Optuna tunes a GA planner's settings, judged on held-out problems."""

from __future__ import annotations

import argparse

from ..errors import UserInputError
from ._paths import path_arg

#: The one-line help ``umpipe-bench --help`` lists without importing :mod:`..bench.tune`
#: (which pulls in the planners, numpy and multiprocessing): see ``cli.build_parser``.
HELP = "tune DGAP/TiDGAP settings with Optuna (TPE) on training problems"


def register(sub: argparse._SubParsersAction) -> None:
    from ..bench.tune import TuneSpec

    d = TuneSpec()
    p = sub.add_parser(
        "tune",
        help=HELP,
        description="Tune a GA planner's settings (population, crossover/mutation, tournament, "
        "elites, initial-population mix) with a seeded Optuna TPE study on training problems, "
        "then compare the best settings with the defaults on held-out problems (same seeds and "
        "budget) and save them (JSON). Several machines can work on one study: give each the "
        "same --storage (an RDB URL they all reach, e.g. postgresql://user@host/db) and "
        "--study-name, and a different --seed.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--planner", default=d.planner, help="planner to tune (tidgap or dgap)")
    p.add_argument("--train", nargs="+", default=list(d.train), metavar="PROBLEM",
                   help="problems the study optimizes on")
    p.add_argument("--heldout", nargs="+", default=list(d.heldout), metavar="PROBLEM",
                   help="problems the tuned settings are judged on")
    p.add_argument("--modes", nargs="+", default=list(d.modes), choices=("stash", "recompute"),
                   help="memory modes every trial runs")
    p.add_argument("--seeds", nargs="+", default=list(d.seeds), metavar="SEED",
                   help="planner seeds, each an integer in 0..4294967295, each once")
    p.add_argument("--budget", default=d.budget, help="planner budget per run")
    p.add_argument("--trials", type=int, default=40, help="trials to add in this run (0: none, "
                   "only judge and save the best of an existing study)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECS",
                   help="stop adding trials after this many seconds (> 0)")
    p.add_argument("--storage", default="sqlite:///results/tuning.db",
                   help="Optuna storage URL (any RDB that SQLAlchemy reaches)")
    p.add_argument("--study-name", default=None,
                   help="study name (default: <planner>-<budget>)")
    p.add_argument("--seed", default=0, metavar="SEED",
                   help="TPE sampler seed, an integer in 0..4294967295 (one per machine)")
    p.add_argument("--save", type=path_arg, default=None, metavar="FILE",
                   help="tuned settings JSON (default: results/tuned-<planner>.json)")
    p.add_argument("--install", action="store_true",
                   help="also write the settings where the '<planner>-tuned' planner reads "
                   "them (umpipe_bench/data/tuned-<planner>.json)")
    p.add_argument("--report", type=path_arg, default="results/tuning.md", metavar="FILE",
                   help="markdown summary: tuned vs default")
    p.add_argument("--no-judge", action="store_true",
                   help="only add trials (a worker of a shared study); judge and save later")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def _check_counts(args: argparse.Namespace) -> None:
    """--trials and --timeout, before anything is read or created."""
    import math

    if args.trials < 0:
        raise UserInputError(f"--trials must be >= 0, got {args.trials}")
    if args.trials == 0 and args.no_judge:
        raise UserInputError("--trials 0 with --no-judge does nothing; give --trials N >= 1")
    if args.timeout is not None and not (args.timeout > 0 and math.isfinite(args.timeout)):
        raise UserInputError(f"--timeout must be a number of seconds > 0, got {args.timeout}")


def run(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..bench.tune import TuneSpec, finish, open_study, run_study, summary_markdown
    from ..files import write_text
    from ..planners.algorithms.tuned import tuned_path
    from ..schema import parse_seed
    from ._lookup import problem as get_problem
    from ._paths import check_output_file, writing

    _check_counts(args)
    args.seed = parse_seed(args.seed, "--seed")
    args.seeds = [parse_seed(s, "--seeds") for s in args.seeds]
    if len(set(args.seeds)) < len(args.seeds):
        raise UserInputError(f"--seeds lists a seed twice: {args.seeds}; each seed once")
    spec = TuneSpec(planner=args.planner, train=tuple(args.train),
                    heldout=tuple(args.heldout), modes=tuple(args.modes),
                    seeds=tuple(args.seeds), budget=args.budget)
    for name in (*spec.train, *spec.heldout):
        get_problem(name)  # fail early, listing the valid names
    overlap = sorted(set(spec.train) & set(spec.heldout))
    if overlap:
        raise UserInputError(f"--heldout problems must not be training problems: {overlap}")
    save = Path(args.save or f"results/tuned-{spec.planner}.json")
    if not args.no_judge:
        check_output_file(save, "--save")
        check_output_file(args.report, "--report")
        if args.install:
            check_output_file(tuned_path(spec.planner), "--install")
    name = args.study_name or f"{spec.planner}-{spec.budget.replace(':', '')}"
    study = open_study(spec, args.storage, name, args.seed,
                       create=args.trials > 0 or args.timeout is not None)
    if args.trials or args.timeout:
        run_study(study, spec, trials=args.trials or None, timeout=args.timeout,
                  progress=not args.no_progress)
    print(_study_line(study, name))
    if args.no_judge:
        return 0
    with writing(save, "--save"):
        result = finish(study, spec, args.storage, save)
    md = summary_markdown(result)
    with writing(args.report, "--report"):
        write_text(args.report, md)
    print(md)
    print(f"wrote {save} and {args.report}")
    if args.install:
        target = tuned_path(spec.planner)
        with writing(target, "--install"):
            write_text(target, save.read_text(encoding="utf-8"))
        print(f"installed {target}" + (" (read by planner 'tidgap-tuned')"
                                       if spec.planner == "tidgap" else ""))
    return 0


def _study_line(study: object, name: str) -> str:
    """The study's size and best score (a study whose trials all failed has none)."""
    import optuna

    trials = study.trials  # type: ignore[attr-defined]
    done = [t for t in trials if t.state == optuna.trial.TrialState.COMPLETE]
    if not done:
        return f"study {name!r}: {len(trials)} trials, none finished"
    best = max(done, key=lambda t: t.value)
    return (f"study {name!r}: {len(trials)} trials; best train score {best.value:+.2%} "
            f"(trial {best.number})")
