"""The C allocator settings of the processes a timed run starts (docs/EXECUTE.md "Allocator").

glibc's ``malloc`` serves a request above its *mmap threshold* (128 KiB at start) with a fresh
``mmap`` and returns it with ``munmap`` when freed, raises that threshold on the fly as such
blocks are freed, and gives the top of its heap back to the system (``sbrk``) when more than a
*trim threshold* is free there. Activations and gradients of a few MiB are allocated and freed
every microbatch, so whether an iteration's tensors come from memory the process already holds
or from new pages the kernel must fault in and zero depends on that history: on vgg16-mini (2 MiB
activations) single iterations of one schedule fell near two values, about 70 and about 100 ms,
in a proportion that changed from launch to launch.

``steady`` (the default) fixes both thresholds for the child processes: every block up to
32 MiB (glibc's largest mmap threshold on 64-bit hosts) comes from the heap, and the heap is
never trimmed (16 GiB trim threshold), with 256 MiB of top pad so that it grows in few steps
(and a larger block, which glibc maps only when the heap's top cannot hold it, comes from the
top too). After the first iterations every tensor is served from pages the process already
touched.
``glibc`` leaves glibc's defaults. ``MALLOC_*`` variables already set in the environment win
over ``steady``. Other C libraries ignore these variables.

The mode comes from the caller, else from ``UMPIPE_MALLOC`` (``steady`` or ``glibc``).
Child processes get it through their environment; a process that measures in itself (the
profiler) sets the same thresholds with glibc's ``mallopt`` (:func:`apply_in_process`).
"""

from __future__ import annotations

import argparse
import contextlib
import ctypes
import ctypes.util
import json
import os
import platform
from collections.abc import Iterator, Mapping, MutableMapping
from pathlib import Path

from ..errors import InputError

__all__ = ["ENV", "MODES", "STEADY", "UNRECORDED", "add_malloc_option", "allocator_env",
           "allocator_mode", "apply_in_process", "record_allocator", "recorded_allocator",
           "spawn_allocator"]

ENV = "UMPIPE_MALLOC"
#: glibc's mallopt parameters for the variables of STEADY
_MALLOPT = {"MALLOC_TRIM_THRESHOLD_": -1, "MALLOC_TOP_PAD_": -2, "MALLOC_MMAP_THRESHOLD_": -3}
_INT_MAX = 2**31 - 1
MODES = ("steady", "glibc")
#: the mode of a measurement that records none (made before the setting existed)
UNRECORDED = "glibc"
#: glibc's tunables as environment variables (read once, when a process starts)
STEADY: dict[str, str] = {
    "MALLOC_MMAP_THRESHOLD_": str(32 << 20),
    "MALLOC_TRIM_THRESHOLD_": str(16 << 30),
    "MALLOC_TOP_PAD_": str(256 << 20),
}


def add_malloc_option(parser: argparse.ArgumentParser,
                      what: str = "the processes' C allocator settings") -> None:
    """The ``--malloc steady|glibc`` option of a command that starts (or is) a timed process;
    ``what`` begins its help."""
    parser.add_argument("--malloc", choices=MODES, default=None,
                        help=f"{what} (default: ${ENV}, else steady; docs/EXECUTE.md "
                        "\"Allocator\")")


def allocator_mode(mode: str | None = None, environ: Mapping[str, str] | None = None) -> str:
    """``mode`` if given, else ``UMPIPE_MALLOC`` from ``environ`` (default ``os.environ``),
    else ``steady``. :class:`InputError` (a ValueError) naming the source for anything else."""
    source = "malloc"
    if mode is None:
        env = os.environ if environ is None else environ
        mode, source = env.get(ENV, "steady"), ENV
    if mode not in MODES:
        raise InputError(f"{source}: expected one of {', '.join(MODES)}, got {mode!r}")
    return mode


def allocator_env(env: MutableMapping[str, str], mode: str) -> MutableMapping[str, str]:
    """Apply ``mode`` to a child's environment ``env`` in place (``steady``: the settings of
    :data:`STEADY` not already set; ``glibc``: those variables removed) and return it."""
    for key, value in STEADY.items():
        if mode == "steady":
            env.setdefault(key, value)
        elif mode == "glibc":
            env.pop(key, None)
        else:
            raise InputError(f"malloc: expected one of {', '.join(MODES)}, got {mode!r}")
    env[ENV] = mode
    return env


@contextlib.contextmanager
def spawn_allocator(mode: str | None = None) -> Iterator[str]:
    """Within the block, ``os.environ`` carries ``mode``'s settings (for children started with
    ``torch.multiprocessing.spawn``, which copy it); restored afterwards. Yields the mode."""
    mode = allocator_mode(mode)
    keys = (*STEADY, ENV)
    saved = {k: os.environ.get(k) for k in keys}
    try:
        allocator_env(os.environ, mode)
        yield mode
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def record_allocator(folder: str | os.PathLike[str], mode: str) -> None:
    """Note ``mode`` in ``folder/allocator.json`` (the measurement files written there)."""
    Path(folder, "allocator.json").write_text(json.dumps({"malloc": mode}) + "\n",
                                              encoding="utf-8")


def recorded_allocator(folder: str | os.PathLike[str]) -> str:
    """The mode :func:`record_allocator` noted in ``folder``; ``glibc`` where none is noted
    (measurements made before the setting existed ran under glibc's defaults)."""
    f = Path(folder, "allocator.json")
    if not f.exists():
        return UNRECORDED
    return str(json.loads(f.read_text(encoding="utf-8"))["malloc"])


def apply_in_process(mode: str | None = None) -> str:
    """Give this process ``mode``'s settings from now on (``steady``: glibc's ``mallopt`` with
    the values of :data:`STEADY`, a trim threshold above ``INT_MAX`` clamped to it, except the
    variables this process started with; ``glibc``: nothing, the process keeps what it started
    with). Returns the mode; other C libraries: nothing is done."""
    mode = allocator_mode(mode)
    if mode != "steady" or platform.libc_ver()[0] != "glibc":
        return mode
    libc = ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    for key, param in _MALLOPT.items():
        if key in os.environ:
            continue
        if libc.mallopt(ctypes.c_int(param), ctypes.c_int(min(int(STEADY[key]), _INT_MAX))) != 1:
            raise OSError(f"mallopt({param}) refused {STEADY[key]}")
    return mode
