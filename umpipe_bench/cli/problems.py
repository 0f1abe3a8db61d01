"""``umpipe-bench problems``: list the registered problems."""

from __future__ import annotations

import argparse
import json


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "problems",
        help="list registered problems (name, S, B, source, device)",
        description="List every registered problem: committed profiles "
        "(umpipe_bench/problems/data) and the synthetic simulation networks.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument("--json", action="store_true", help="print a JSON list instead of a table")
    p.add_argument("--filter", default="", help="only names containing this text")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ..registry import get_problem, problem_names

    rows = []
    for name in problem_names():
        if args.filter and args.filter.lower() not in name:
            continue
        pr = get_problem(name)
        rows.append({"name": name, "S": pr.S, "B": pr.B, "source": pr.source,
                     "device": pr.device, "description": pr.description})
    if args.json:
        print(json.dumps(rows, indent=1))
        return 0
    w = max([len(r["name"]) for r in rows] + [4])
    print(f"{'name':<{w}}  {'S':>3}  {'B':>4}  {'source':<10}  device")
    for r in rows:
        print(f"{r['name']:<{w}}  {r['S']:>3}  {r['B']:>4}  {r['source']:<10}  {r['device']}")
    return 0
