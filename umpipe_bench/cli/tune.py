"""``umpipe-bench tune``: Optuna tunes a GA planner's settings, judged on held-out problems."""

from __future__ import annotations

import argparse

from ..errors import UserInputError

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
                   "only judge and save the study's best)")
    p.add_argument("--timeout", type=float, default=None, metavar="SECS",
                   help="stop adding trials after this many seconds")
    p.add_argument("--storage", default="sqlite:///results/tuning.db",
                   help="Optuna storage URL (any RDB that SQLAlchemy reaches)")
    p.add_argument("--study-name", default=None,
                   help="study name (default: <planner>-<budget>)")
    p.add_argument("--seed", default=0, metavar="SEED",
                   help="TPE sampler seed, an integer in 0..4294967295 (one per machine)")
    p.add_argument("--save", default=None, metavar="FILE",
                   help="tuned settings JSON (default: results/tuned-<planner>.json)")
    p.add_argument("--install", action="store_true",
                   help="also write the settings where the '<planner>-tuned' planner reads "
                   "them (umpipe_bench/data/tuned-<planner>.json)")
    p.add_argument("--report", default="results/tuning.md", metavar="FILE",
                   help="markdown summary: tuned vs default")
    p.add_argument("--no-judge", action="store_true",
                   help="only add trials (a worker of a shared study); judge and save later")
    p.add_argument("--no-progress", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    import shutil
    from pathlib import Path

    from ..bench.tune import TuneSpec, finish, open_study, run_study, summary_markdown
    from ..planners.algorithms.tuned import tuned_path
    from ..problem import atomic_write_text
    from ..schema import parse_seed
    from ._lookup import problem as get_problem
    from ._paths import check_output_file, writing

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
    if args.trials < 0:
        raise UserInputError(f"--trials must be >= 0, got {args.trials}")
    if not args.no_judge:
        check_output_file(args.save, "--save")
        check_output_file(args.report, "--report")
    name = args.study_name or f"{spec.planner}-{spec.budget.replace(':', '')}"
    study = open_study(spec, args.storage, name, args.seed)
    if args.trials or args.timeout:
        run_study(study, spec, trials=args.trials or None, timeout=args.timeout,
                  progress=not args.no_progress)
    print(f"study {name!r}: {len(study.trials)} trials; best train score "
          f"{study.best_value:+.2%} (trial {study.best_trial.number})")
    if args.no_judge:
        return 0
    save = Path(args.save or f"results/tuned-{spec.planner}.json")
    result = finish(study, spec, args.storage, save)
    md = summary_markdown(result)
    with writing(args.report, "--report"):
        atomic_write_text(args.report, md)
    print(md)
    print(f"wrote {save} and {args.report}")
    if args.install:
        target = tuned_path(spec.planner)
        shutil.copyfile(save, target)
        print(f"installed {target}" + (" (read by planner 'tidgap-tuned')"
                                       if spec.planner == "tidgap" else ""))
    return 0
