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
import errno
import importlib
import sys
from collections.abc import Sequence

__all__ = ["main"]

# Sub-command modules, in the order --help lists them.
SUBCOMMANDS = (
    "problems", "simulate", "schedules", "profile", "plan", "execute", "bench", "report", "tune",
    "study", "best_known", "certify",
)


class DefaultsFormatter(argparse.ArgumentDefaultsHelpFormatter):
    """Shows ``(default: X)`` only where a default says something (not None/False)."""

    def _get_help_string(self, action: argparse.Action) -> str | None:
        d = action.default
        if d is None or d is False or d is argparse.SUPPRESS or action.required:
            return action.help
        if not action.help and action.option_strings and action.nargs != 0:
            return "(default: %(default)s)"  # an option without help text still shows it
        return super()._get_help_string(action)

    def _expand_help(self, action: argparse.Action) -> str:
        """A list default reads as the words a user would type (``stash recompute``)."""
        if isinstance(action.default, (list, tuple)):
            shown = " ".join(str(x) for x in action.default)
            action = argparse.Action(action.option_strings, action.dest, default=shown,
                                     help=action.help, choices=action.choices,
                                     nargs=action.nargs, metavar=action.metavar)
        return super()._expand_help(action)


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


#: OSErrors that mean "this path cannot be used as given" (a user's mistake: one line, exit 2);
#: any other OSError (a full disk, an I/O error) keeps its traceback.
_PATH_ERRNOS = {errno.ENOENT, errno.EEXIST, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG,
                errno.EACCES, errno.EPERM, errno.EROFS, errno.ELOOP, errno.ENXIO}


def main(argv: Sequence[str] | None = None) -> int:
    """Run one command; ``argv`` None: this process is the program (``umpipe-bench``,
    ``python -m umpipe_bench``), which on SIGINT or SIGTERM exits as soon as the clean-up
    has run (:func:`_interrupted`)."""
    import time

    program = argv is None
    # a command's time budget counts from here: the process's start, as the program
    started = _process_start() if program else time.perf_counter()
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = build_parser(_command(argv), lazy=True)
    args = parser.parse_args(argv)
    args.started = started
    from ..errors import ExecutionError, InternalError, Terminated, UmpipeError
    from ..runtime.lifetime import terminate_raises

    try:
        with terminate_raises():  # SIGTERM/SIGHUP clean up children as Ctrl-C does
            return int(args.func(args) or 0)
    except (ExecutionError, InternalError):
        raise  # no user causes these: a failed run or a bug keeps its traceback
    except UmpipeError as exc:  # anything else a user can cause: one line, exit code 2
        text = " ".join(str(exc).split()) or type(exc).__name__
        print(f"umpipe-bench {args.command}: error: {text}", file=sys.stderr)
        return 2
    except BrokenPipeError:  # e.g. `umpipe-bench problems | head`
        import os

        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0
    except OSError as exc:  # a path the user named cannot be read or written
        if exc.errno not in _PATH_ERRNOS:
            raise
        where = f": {exc.filename}" if exc.filename else ""
        print(f"umpipe-bench {args.command}: error: {exc.strerror or exc}{where}",
              file=sys.stderr)
        return 2
    except Terminated as exc:
        print(f"umpipe-bench {args.command}: {exc}", file=sys.stderr)
        return _interrupted(128 + exc.signum, program)
    except KeyboardInterrupt:
        print(f"umpipe-bench {args.command}: interrupted", file=sys.stderr)
        return _interrupted(130, program)


def _process_start() -> float:
    """The ``time.perf_counter()`` value at which this process started (Linux: its start time
    in /proc, so the interpreter's start and the imports count; elsewhere: now)."""
    import os
    import time

    now = time.perf_counter()
    try:
        with open("/proc/self/stat", "rb") as fh:
            start_ticks = int(fh.read().rsplit(b")", 1)[1].split()[19])  # field 22: starttime
        with open("/proc/uptime", encoding="ascii") as fh:
            uptime = float(fh.read().split()[0])
        age = uptime - start_ticks / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return now
    return now - age if 0.0 <= age < 60.0 else now


def _interrupted(code: int, program: bool) -> int:
    """The exit of a command a signal ended. Its clean-up has run by now (every ``finally``
    on the way up: partial results saved, temporary files removed, the bench's workers and
    the launcher's processes stopped); as the program, what is left is the interpreter
    freeing the run's objects, which after a large search or schedule table takes seconds,
    so the process exits at once (docs/ARCHITECTURE.md, "Processes")."""
    if not program:
        return code
    import os

    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    os._exit(code)


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
