"""The ``umpipe-bench`` command line: one module per sub-command, each with ``register``.

Sub-command modules import heavy libraries (torch, optuna, matplotlib) inside their ``run``
functions, so ``umpipe-bench --help`` stays fast. A module whose ``register`` itself needs a
heavy import (``tune``: its defaults live in :mod:`..bench.tune`) declares a one-line ``HELP``;
:func:`main` then registers it fully only when it is the command being run, and as a one-line
entry otherwise. A test checks that ``--help`` and ``problems`` import no numba, torch,
optuna, pydantic or matplotlib.
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
)


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` only where a default says something (not None/False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        d = action.default
        if d is None or d is False or d is argparse.SUPPRESS or action.required:
            return action.help
        return super()._get_help_string(action)


def _command(argv: Sequence[str]) -> str | None:
    """The sub-command named in ``argv`` (the first non-option word), if any."""
    for a in argv:
        if not a.startswith("-"):
            return a if a in SUBCOMMANDS else None
    return None


def build_parser(command: str | None = None, lazy: bool = False) -> argparse.ArgumentParser:
    """The full parser; with ``lazy``, sub-commands that declare ``HELP`` are registered
    fully only when they are ``command``."""
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
        mod = importlib.import_module(modname)
        if lazy and name != command and hasattr(mod, "HELP"):
            sub.add_parser(name, help=mod.HELP)
        else:
            mod.register(sub)
    for sp in sub.choices.values():
        sp.formatter_class = DefaultsFormatter
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command(argv), lazy=True)
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
