"""Same seed, same plan: the results of fixed-evaluation and fixed-generation budgets, as a
fingerprint per case (T, evaluations, a digest of the plan), one JSON line each.

Run it on two checkouts and compare the lines; any difference is a change of results:

    PYTHONPATH=A python scripts/budget_determinism.py > a.jsonl
    PYTHONPATH=B python scripts/budget_determinism.py > b.jsonl && diff a.jsonl b.jsonl

``--quick`` runs a third of the cases (the fast ones).
"""

from __future__ import annotations

import argparse
import hashlib
import json

from umpipe_bench.registry import get_planner_class, get_problem

#: (planner, settings, problem, budgets); every case runs in both modes, seeds 0 and 1.
CASES = [
    ("tidgap", {}, "gpt1-14", ["evals:3000", "evals:20000", "gens:5"]),
    ("tidgap", {}, "vgg16", ["evals:3000", "evals:20000", "gens:5"]),
    ("tidgap", {}, "sim-s8-b64-s0", ["evals:3000", "evals:20000", "gens:5"]),
    ("tidgap", {}, "gpt1-14", ["evals:200000"]),  # islands
    ("tidgap", {"restarts": 2}, "vgg16", ["evals:300000"]),  # rounds and islands
    ("tidgap", {}, "sim-s32-b256-s0", ["evals:40000"]),  # the stage descent
    ("tidgap", {"schedule": "gpipe"}, "vgg16", ["evals:5000"]),
    ("dgap", {}, "gpt1-14", ["evals:1500"]),
    ("dgap", {}, "sim-s8-b64-s0", ["gens:2"]),
    ("random-search", {}, "vgg16", ["evals:3000"]),
    ("optuna-tpe", {}, "gpt1-14", ["evals:120"]),
    ("cmaes", {}, "gpt1-14", ["evals:400"]),
    ("local-greedy", {}, "vgg16", ["evals:1"]),
    ("greedy-dp", {}, "sim-s8-b64-s0", ["evals:1"]),
    ("gpipe", {}, "vgg16", ["evals:3000"]),
    ("1f1b", {}, "sim-s8-b64-s0", ["evals:3000"]),
]
QUICK = {"gpt1-14", "sim-s8-b64-s0"}


def fingerprint(planner: str, settings: dict, problem: str, mode: str, budget: str,
                seed: int) -> dict:
    res = get_planner_class(planner)(**settings).plan(get_problem(problem), mode=mode,
                                                budget=budget, seed=seed)
    plan = json.dumps({k: v for k, v in res.plan.to_dict().items() if k != "meta"},
                      sort_keys=True)
    return {"planner": planner, "settings": settings, "problem": problem, "mode": mode,
            "budget": budget, "seed": seed, "T": repr(res.iteration_time),
            "evaluations": res.evaluations, "schedule": res.schedule,
            "plan": hashlib.sha256(plan.encode()).hexdigest()[:16]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--quick", action="store_true")
    args = ap.parse_args()
    for planner, settings, problem, budgets in CASES:
        if args.quick and (problem not in QUICK or "200000" in budgets[0]):
            continue
        for budget in budgets:
            for mode in ("stash", "recompute"):
                for seed in (0, 1):
                    print(json.dumps(fingerprint(planner, settings, problem, mode, budget,
                                                 seed)), flush=True)


if __name__ == "__main__":
    main()
