"""Output paths of the command line, checked before any work starts.

A command that writes a file checks its path first with the rules the write itself applies
(:mod:`umpipe_bench.files`: a regular file or a new name, links followed, in an existing
writable folder), so a long run such as ``profile`` never finishes only to fail on its output;
the write itself names the option in its one-line error too (docs/ARCHITECTURE.md, "Errors").
An output folder (``bench --out``) may be made, its nearest existing folder being writable.
"""

from __future__ import annotations

import argparse
import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import UserInputError
from ..files import named_output, output_target

__all__ = ["check_output_dir", "check_output_file", "path_arg", "writing"]


def path_arg(text: str) -> str:
    """An argparse ``type`` for a file or folder option: an empty (or blank) path is refused
    by the parser, never read as "no path given"."""
    if not text.strip():
        raise argparse.ArgumentTypeError("expected a path, got an empty string")
    return text


path_arg.__name__ = "path"


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists():
        p = p.parent
    return p


def _check_parent(path: Path, option: str) -> None:
    """The nearest existing folder on the way to ``path`` must be a writable folder."""
    base = _nearest_existing(path)
    if not base.is_dir():
        raise UserInputError(f"{option} {str(path)!r}: {str(base)!r} is not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserInputError(f"{option} {str(path)!r}: folder {str(base)!r} is not writable")


def check_output_file(path: str | os.PathLike[str] | None, option: str) -> None:
    """Fail now if ``path`` cannot become a file (:func:`umpipe_bench.files.output_target`):
    it is a folder, a device, a FIFO or a socket, or its folder is missing or not writable."""
    if path is None:
        return
    output_target(path, option)


def check_output_dir(path: str | os.PathLike[str] | None, option: str) -> None:
    """Fail now if ``path`` cannot be (or become) a writable folder."""
    if path is None:
        return
    p = Path(path)
    if p.exists() and not p.is_dir():
        raise UserInputError(f"{option} {str(p)!r}: is a file; expected a folder")
    _check_parent(p, option)


@contextmanager
def writing(path: str | os.PathLike[str], option: str) -> Iterator[None]:
    """Name ``option`` in the one-line error of any write to ``path`` within the block, and
    turn an ``OSError`` there into such a line."""
    try:
        with named_output(path, option):
            yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UserInputError(f"{option} {str(path)!r}: cannot write: {reason}") from None
