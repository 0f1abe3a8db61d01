"""Nothing outlives its command (docs/ARCHITECTURE.md, "Processes").

Three pieces, each for one way a command can end:

* :func:`die_with_parent` (a child's side): the Linux parent-death signal
  (``prctl(PR_SET_PDEATHSIG)`` through ctypes), so a child is killed when its parent dies even
  by SIGKILL, when no clean-up code of the parent runs. Elsewhere it does nothing.
* :func:`child_setup`: what a child runs first: its own process group (a terminal's Ctrl-C or
  a ``kill -- -PGID`` of the parent's group reaches the parent only, which then stops its
  children itself) and the parent-death signal.
* :func:`terminate_raises`: SIGTERM (and SIGHUP) in the parent raise :class:`Terminated`, so
  its ``finally`` blocks stop the children as they do on Ctrl-C.
* :func:`process_pool` and :func:`kill_pool`: a process pool whose workers are children of
  that kind (``bench --jobs``, ``study --jobs``), and the way to stop them at once (a pool's
  ``shutdown`` waits for the running tasks).

Pure: imports no torch.
"""

from __future__ import annotations

import ctypes
import os
import signal
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import TYPE_CHECKING

from ..errors import Terminated

if TYPE_CHECKING:
    from concurrent.futures import ProcessPoolExecutor

__all__ = ["Terminated", "child_setup", "die_with_parent", "kill_pool", "process_pool",
           "terminate_raises"]

_PR_SET_PDEATHSIG = 1


def die_with_parent(parent: int | None = None, sig: int = signal.SIGKILL) -> None:
    """Have the kernel send ``sig`` to this process when its parent dies (Linux only).

    ``parent`` is the pid the caller expects as parent (default: the current one); if it has
    already died (the process was re-parented before this call), ``sig`` is sent at once.
    """
    if not sys.platform.startswith("linux"):
        return
    expected = os.getppid() if parent is None else parent
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(_PR_SET_PDEATHSIG, int(sig), 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_PDEATHSIG): {os.strerror(err)}")
    if os.getppid() != expected:
        os.kill(os.getpid(), sig)


def child_setup(parent: int, *, new_group: bool = True) -> Callable[[], None]:
    """A function for ``subprocess.Popen(preexec_fn=...)`` or a process pool's ``initializer``:
    own process group (unless ``new_group`` is False, e.g. after ``start_new_session``),
    default SIGTERM/SIGINT handling, and death with ``parent``."""

    def setup() -> None:
        if new_group:
            os.setpgid(0, 0)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        signal.signal(signal.SIGINT, signal.SIG_DFL)
        die_with_parent(parent)

    return setup


def _raise_terminated(signum: int, frame: FrameType | None) -> None:
    raise Terminated(signum)


@contextmanager
def terminate_raises() -> Iterator[None]:
    """Within the block, SIGTERM and SIGHUP raise :class:`Terminated` (main thread only)."""
    import threading

    if threading.current_thread() is not threading.main_thread():
        yield
        return
    sigs = (signal.SIGTERM, signal.SIGHUP)
    old = {s: signal.getsignal(s) for s in sigs}
    for s in sigs:
        if old[s] is not signal.SIG_IGN:  # nohup'd: keep ignoring SIGHUP
            signal.signal(s, _raise_terminated)
    try:
        yield
    finally:
        for s, h in old.items():
            signal.signal(s, h if h is not None else signal.SIG_DFL)


def process_pool(jobs: int) -> ProcessPoolExecutor:
    """A pool of ``jobs`` worker processes, each in its own process group and dying with this
    process (:func:`child_setup`), even when it is killed by SIGKILL."""
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    methods = multiprocessing.get_all_start_methods()
    ctx = multiprocessing.get_context("fork" if "fork" in methods else "spawn")
    return ProcessPoolExecutor(max_workers=jobs, mp_context=ctx,
                               initializer=child_setup(os.getpid()))


def kill_pool(ex: ProcessPoolExecutor) -> None:
    """SIGKILL every worker's process group, then shut the pool down without waiting: a
    running task cannot be stopped any other way, and ``shutdown`` would wait for it. (The
    pool keeps its workers in the private ``_processes``; Python 3.14's ``terminate_workers``
    is the public form.)"""
    for proc in list((getattr(ex, "_processes", None) or {}).values()):
        for kill in (lambda p=proc: os.killpg(p.pid, signal.SIGKILL), proc.kill):
            try:
                kill()
                break
            except (ProcessLookupError, PermissionError, OSError):
                continue
    ex.shutdown(wait=True, cancel_futures=True)

