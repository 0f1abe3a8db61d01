"""Output paths of the command line, checked before any work starts.

A command that writes a file checks its path first (not a folder; its nearest existing folder
writable), so a long run such as ``profile`` never finishes only to fail on its output; the
write itself still turns an ``OSError`` into one line naming the option (docs/ARCHITECTURE.md,
"Errors").
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from ..errors import UserInputError

__all__ = ["check_output_dir", "check_output_file", "writing"]


def _nearest_existing(path: Path) -> Path:
    p = path.absolute()
    while not p.exists():
        p = p.parent
    return p


def _check_parent(path: Path, option: str, start: Path | None = None) -> None:
    """The nearest existing folder on the way to ``path`` (from ``start``, default
    ``path``) must be a writable folder."""
    base = _nearest_existing(path if start is None else start)
    if not base.is_dir():
        raise UserInputError(f"{option} {str(path)!r}: {str(base)!r} is not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserInputError(f"{option} {str(path)!r}: folder {str(base)!r} is not writable")


def check_output_file(path: str | os.PathLike[str] | None, option: str) -> None:
    """Fail now if ``path`` cannot become a file: it is a folder, or no folder on its way
    can be written."""
    if path is None:
        return
    p = Path(path)
    if p.is_dir():
        raise UserInputError(f"{option} {str(p)!r}: is a folder; expected a file name")
    if p.exists() and not os.access(p, os.W_OK):
        raise UserInputError(f"{option} {str(p)!r}: file is not writable")
    # from the file's folder: an existing file is overwritten, its folder must be writable
    _check_parent(p, option, p.parent)


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
    """Turn an ``OSError`` while writing ``path`` into a one-line error naming ``option``."""
    try:
        yield
    except OSError as exc:
        reason = exc.strerror or str(exc)
        raise UserInputError(f"{option} {str(path)!r}: cannot write: {reason}") from None
