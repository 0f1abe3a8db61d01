"""Output files: every file a command writes goes through :func:`atomic_output`.

* A symbolic link is followed and its target is written; the link stays a link.
* The new content goes to a temporary file in the target's folder, which is then renamed onto
  the target, so a reader (or a run killed at any instant) sees the old file or the new one,
  never half of one. An error, Ctrl-C or SIGTERM removes the temporary file and leaves the old
  file as it was.
* Only a regular file is ever replaced: a folder, a device (``/dev/null``, ``/dev/full``), a
  FIFO or a socket is refused, as is a file that is not writable; so is a path whose folder does
  not exist or cannot be written, unless the caller owns the folder (``parents=True``: the
  files a command writes inside its own output folder).
* :func:`append_csv` adds rows to a CSV file only under the same header; a file with another
  header is refused, never rewritten.

A refusal or a failed write is a :class:`~umpipe_bench.errors.UserInputError` whose one line
names the command-line option (when one was registered with :func:`named_output`) and the
path (docs/ARCHITECTURE.md, "Errors").

This module imports no torch.
"""

from __future__ import annotations

import csv
import io
import os
import stat
import tempfile
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from contextvars import ContextVar
from pathlib import Path

from .errors import UserInputError

__all__ = ["append_csv", "atomic_output", "check_append_csv", "named_output", "output_target",
           "write_bytes", "write_text"]

#: What a path that is not a regular file is, for the message that refuses it.
_KINDS = ((stat.S_ISDIR, "a folder"), (stat.S_ISCHR, "a character device"),
          (stat.S_ISBLK, "a block device"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISSOCK, "a socket"))

#: ``(absolute path, option)`` pairs of the outputs a command is writing (:func:`named_output`).
_OPTIONS: ContextVar[tuple[tuple[str, str], ...]] = ContextVar("umpipe_output_options",
                                                                default=())


@contextmanager
def named_output(path: str | os.PathLike[str], option: str) -> Iterator[None]:
    """Within the block, errors about ``path`` name the option that gave it (``--out``)."""
    token = _OPTIONS.set(((os.path.abspath(path), option), *_OPTIONS.get()))
    try:
        yield
    finally:
        _OPTIONS.reset(token)


def _label(path: str | os.PathLike[str], option: str | None) -> str:
    if option is None:
        key = os.path.abspath(path)
        option = next((o for p, o in _OPTIONS.get() if p == key), None)
    return f"{option} {str(path)!r}" if option else repr(str(path))


def _kind(mode: int) -> str:
    return next((name for test, name in _KINDS if test(mode)), "not a regular file")


def _check_folder(folder: Path, label: str, parents: bool) -> None:
    base = folder
    if not base.exists():
        if not parents:
            raise UserInputError(f"{label}: folder {str(folder)!r} does not exist; create it "
                                 "or choose another path")
        while not base.exists():
            base = base.parent
    if not base.is_dir():
        raise UserInputError(f"{label}: {str(base)!r} is not a folder")
    if not os.access(base, os.W_OK | os.X_OK):
        raise UserInputError(f"{label}: folder {str(base)!r} is not writable")


def _leads_into_proc(path: str | os.PathLike[str]) -> bool:
    """Whether ``path`` or a link on its way is in ``/proc``: ``/dev/stdout`` and ``/dev/fd/N``
    lead there, to whatever a file descriptor holds (a terminal, a pipe, a log file that must
    not be replaced under the process writing it)."""
    p = os.path.abspath(path)
    for _ in range(40):  # the kernel's own limit on links followed
        p = os.path.join(os.path.realpath(os.path.dirname(p)), os.path.basename(p))
        if p == "/proc" or p.startswith("/proc/"):
            return True
        if not os.path.islink(p):
            return False
        p = os.path.join(os.path.dirname(p), os.readlink(p))
    return False


def output_target(path: str | os.PathLike[str], option: str | None = None, *,
                  parents: bool = False) -> Path:
    """The regular file a write to ``path`` replaces (symbolic links followed), after checking
    that it can be written; refuses, in one line, anything else (module docstring)."""
    label = _label(path, option)
    if not str(path):
        raise UserInputError(f"{label}: empty path; expected a file name")
    if _leads_into_proc(path):
        raise UserInputError(f"{label}: leads into /proc (a process's file descriptor, as "
                             "/dev/stdout does); expected a regular file")
    target = Path(os.path.realpath(path))
    via = f" (the link leads to {str(target)!r})" if target != Path(os.path.abspath(path)) else ""
    try:
        st: os.stat_result | None = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:  # a loop of links, a file where a folder should be, no permission
        raise UserInputError(f"{label}: cannot write: {exc.strerror or exc}") from None
    if st is not None:
        if not stat.S_ISREG(st.st_mode):
            expected = "expected a file name" if stat.S_ISDIR(st.st_mode) else \
                "expected a regular file (it is never written through)"
            raise UserInputError(f"{label}: is {_kind(st.st_mode)}{via}; {expected}")
        if not os.access(target, os.W_OK):
            raise UserInputError(f"{label}: file is not writable{via}")
    _check_folder(target.parent, label, parents)
    return target


def _mode_of(target: Path) -> tuple[int, os.stat_result | None]:
    try:
        st = os.stat(target)
        return stat.S_IMODE(st.st_mode), st
    except FileNotFoundError:
        umask = os.umask(0)
        os.umask(umask)
        return 0o666 & ~umask, None


@contextmanager
def atomic_output(path: str | os.PathLike[str], option: str | None = None, *,
                  parents: bool = False) -> Iterator[Path]:
    """Yield a temporary path beside ``path``'s target; write it whole in the block; on leaving
    the block it replaces the target (module docstring). Writers that take a file name
    (``savefig``) write the yielded path; give them the format explicitly, as its suffix is
    ``.tmp``."""
    label = _label(path, option)
    target = output_target(path, option, parents=parents)
    tmp: Path | None = None
    try:
        if parents:
            target.parent.mkdir(parents=True, exist_ok=True)
        fd, name = tempfile.mkstemp(prefix=f".{target.name}.", suffix=".tmp", dir=target.parent)
        tmp = Path(name)
        os.close(fd)
        mode, old = _mode_of(target)
        os.chmod(tmp, mode)  # mkstemp makes 0600: keep the old file's mode, else the usual one
        if old is not None and (old.st_uid, old.st_gid) != (os.geteuid(), os.getegid()):
            try:
                os.chown(tmp, old.st_uid, old.st_gid)
            except PermissionError:
                pass  # only root can give a file away; the content is what matters
        yield tmp
        fd = os.open(tmp, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, target)
    except OSError as exc:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise UserInputError(f"{label}: cannot write: {exc.strerror or exc}") from None
    except BaseException:
        if tmp is not None:
            tmp.unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike[str], text: str, option: str | None = None, *,
               parents: bool = False) -> None:
    """Replace ``path``'s target with ``text`` (UTF-8) through :func:`atomic_output`."""
    with atomic_output(path, option, parents=parents) as tmp, \
            open(tmp, "w", encoding="utf-8") as fh:
        fh.write(text)


def write_bytes(path: str | os.PathLike[str], data: bytes, option: str | None = None, *,
                parents: bool = False) -> None:
    """Replace ``path``'s target with ``data`` through :func:`atomic_output`."""
    with atomic_output(path, option, parents=parents) as tmp:
        tmp.write_bytes(data)


def _csv_head(path: str | os.PathLike[str], columns: Sequence[str],
              option: str | None) -> str:
    """The text :func:`append_csv` writes ``body`` after: the file's, or the header alone."""
    label = _label(path, option)
    target = output_target(path, option)
    old = ""
    if target.exists():
        try:
            old = target.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UserInputError(f"{label}: not a CSV text file (not UTF-8); not appending to "
                                 "it") from None
        except OSError as exc:
            raise UserInputError(f"{label}: cannot read: {exc.strerror or exc}") from None
    columns = list(columns)
    if not old.strip():
        buf = io.StringIO()
        csv.writer(buf, lineterminator="\n").writerow(columns)
        return buf.getvalue()
    header = next(csv.reader(io.StringIO(old)), [])
    if header != columns:
        i = next((i for i, (a, b) in enumerate(zip(header, columns)) if a != b),
                 min(len(header), len(columns)))
        have = repr(header[i]) if i < len(header) else "nothing"
        want = repr(columns[i]) if i < len(columns) else "nothing"
        raise UserInputError(
            f"{label}: its header differs from this command's columns at column {i + 1} (the "
            f"file has {have}, expected {want}); not appending to it: choose another file or "
            "move it away")
    return old if old.endswith("\n") else old + "\n"


def check_append_csv(path: str | os.PathLike[str], columns: Sequence[str],
                     option: str | None = None) -> None:
    """Fail now if :func:`append_csv` would refuse ``path`` (before hours of work)."""
    _csv_head(path, columns, option)


def append_csv(path: str | os.PathLike[str], columns: Sequence[str], body: str,
               option: str | None = None) -> None:
    """Add the CSV lines ``body`` to ``path``: a new (or empty) file gets ``columns`` as its
    header; an existing one must have exactly that header, else it is refused, naming the
    first column that differs. The file is rewritten whole (:func:`atomic_output`)."""
    write_text(path, _csv_head(path, columns, option) + body, option)
