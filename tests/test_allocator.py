"""The C allocator settings of timed runs (umpipe_bench/runtime/allocator.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from umpipe_bench.errors import InputError
from umpipe_bench.runtime.allocator import (
    ENV,
    STEADY,
    allocator_env,
    allocator_mode,
    record_allocator,
    recorded_allocator,
    spawn_allocator,
)

ROOT = Path(__file__).resolve().parents[1]


def test_mode_comes_from_the_caller_then_the_environment() -> None:
    assert allocator_mode(None, {}) == "steady"
    assert allocator_mode(None, {ENV: "glibc"}) == "glibc"
    assert allocator_mode("steady", {ENV: "glibc"}) == "steady"
    with pytest.raises(InputError, match=f"^{ENV}: expected one of steady, glibc, got 'fast'$"):
        allocator_mode(None, {ENV: "fast"})
    with pytest.raises(InputError, match="^malloc: expected one of"):
        allocator_mode("jemalloc", {})


def test_steady_keeps_what_the_user_set_and_glibc_removes_it() -> None:
    env = allocator_env({"MALLOC_TRIM_THRESHOLD_": "1", "PATH": "/bin"}, "steady")
    assert env["MALLOC_TRIM_THRESHOLD_"] == "1"  # the user's value wins
    assert env["MALLOC_MMAP_THRESHOLD_"] == STEADY["MALLOC_MMAP_THRESHOLD_"]
    assert env[ENV] == "steady" and env["PATH"] == "/bin"
    env = allocator_env(dict(STEADY, PATH="/bin"), "glibc")
    assert env == {"PATH": "/bin", ENV: "glibc"}


def test_spawn_allocator_restores_the_environment(monkeypatch, tmp_path) -> None:
    monkeypatch.setenv("MALLOC_TOP_PAD_", "7")
    monkeypatch.delenv("MALLOC_MMAP_THRESHOLD_", raising=False)
    monkeypatch.delenv(ENV, raising=False)
    before = dict(os.environ)
    with spawn_allocator("glibc") as mode:
        assert mode == "glibc" and "MALLOC_TOP_PAD_" not in os.environ
    assert dict(os.environ) == before
    with spawn_allocator("steady"):
        assert os.environ["MALLOC_MMAP_THRESHOLD_"] == STEADY["MALLOC_MMAP_THRESHOLD_"]
        assert os.environ["MALLOC_TOP_PAD_"] == "7"
    assert dict(os.environ) == before
    assert recorded_allocator(tmp_path) == "glibc"  # nothing noted: glibc's defaults
    record_allocator(tmp_path, "steady")
    assert recorded_allocator(tmp_path) == "steady"


# Four 3 MiB blocks malloc'ed, written and freed per iteration (what a microbatch's activations
# do through torch's CPU allocator). Under glibc's defaults the first free raises the mmap
# threshold to 3 MiB and the trim threshold to 6 MiB: from then on the four blocks come from the
# top of the heap and the 12 MiB freed there are given back, so every iteration faults them in
# again (3,040 pages here). Under the steady settings the heap is never trimmed: after the first
# iterations no page is faulted. A block's pages: 768.
_FAULTS = """
import ctypes, ctypes.util, resource, sys
from umpipe_bench.runtime.allocator import apply_in_process
if sys.argv[1:] == ["in-process"]:
    apply_in_process("steady")
libc = ctypes.CDLL(ctypes.util.find_library("c"))
libc.malloc.restype = ctypes.c_void_p
libc.free.argtypes = [ctypes.c_void_p]
n = 3 << 20
def it():
    blocks = [libc.malloc(n) for _ in range(4)]
    for b in blocks:
        ctypes.memset(b, 1, n)
    for b in blocks:
        libc.free(b)
for _ in range(10):
    it()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    it()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc settings")
def test_steady_settings_stop_the_page_faults_of_freed_blocks() -> None:
    faults = {}
    for mode, args in (("glibc", []), ("steady", []), ("in-process", ["in-process"])):
        env = allocator_env(dict(os.environ), "glibc" if args else mode)
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        out = subprocess.run([sys.executable, "-c", _FAULTS, *args], env=env,
                             capture_output=True, text=True, check=True, timeout=120)
        faults[mode] = int(out.stdout.strip())
    block = (3 << 20) // 4096
    assert faults["glibc"] >= 40 * 3 * block, faults  # at least three blocks per iteration
    assert faults["steady"] <= block, faults
    assert faults["in-process"] <= block, faults  # mallopt from within, as the profiler does


def test_a_bad_mode_in_the_environment_is_one_line_and_exit_2(monkeypatch, tmp_path,
                                                             capsys) -> None:
    from umpipe_bench.cli import main

    monkeypatch.setenv(ENV, "fast")
    out = tmp_path / "p.json"
    rc = main(["profile", "tiny-mlp", "--batch", "4", "--repeats", "1", "--no-progress",
               "--out", str(out)])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and not out.exists()
    assert err == [f"umpipe-bench profile: error: {ENV}: expected one of steady, glibc, "
                   "got 'fast'"]
