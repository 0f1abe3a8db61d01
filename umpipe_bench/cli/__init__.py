"""The ``umpipe-bench`` command line: one module per sub-command, each with ``register``.

Sub-command modules import heavy libraries (torch, optuna, matplotlib) inside their ``run``
functions, so ``umpipe-bench --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

# Sub-command modules, in the order --help lists them.
SUBCOMMANDS = (
    "problems", "simulate", "profile", "plan", "execute", "bench", "report", "tune",
    "study",
)


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` only where a default says something (not None/False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        d = action.default
        if d is None or d is False or d is argparse.SUPPRESS or action.required:
            return action.help
        return super()._get_help_string(action)


def build_parser() -> argparse.ArgumentParser:
    from .. import __version__

    parser = argparse.ArgumentParser(
        prog="umpipe-bench",
        description="Unequal-microbatch pipeline parallelism: profile models into problems, "
        "simulate and plan per-stage microbatch sizes, execute plans with torch.distributed, "
        "and benchmark it all.",
        formatter_class=DefaultsFormatter,
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in SUBCOMMANDS:
        modname = f"{__name__}.{name}"
        if importlib.util.find_spec(modname) is None:
            continue
        importlib.import_module(modname).register(sub)
    for sp in sub.choices.values():
        sp.formatter_class = DefaultsFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    from ..plan import PlanError
    from ..problem import ProblemError

    try:
        return int(args.func(args) or 0)
    except (ProblemError, PlanError, KeyError, ValueError) as exc:
        msg = exc.args[0] if isinstance(exc, KeyError) and exc.args else exc
        print(f"umpipe-bench {args.command}: error: {msg}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `umpipe-bench problems | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except KeyboardInterrupt:
        print(f"umpipe-bench {args.command}: interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
