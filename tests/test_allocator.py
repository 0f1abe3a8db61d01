"""The C allocator settings of timed runs (umpipe_bench/runtime/allocator.py)."""

from __future__ import annotations

import os
import platform
import subprocess
import sys

import pytest

from umpipe_bench.runtime.allocator import (
    ENV,
    STEADY,
    allocator_env,
    allocator_mode,
    record_allocator,
    recorded_allocator,
    spawn_allocator,
)


def test_mode_comes_from_the_caller_then_the_environment() -> None:
    assert allocator_mode(None, {}) == "steady"
    assert allocator_mode(None, {ENV: "glibc"}) == "glibc"
    assert allocator_mode("steady", {ENV: "glibc"}) == "steady"
    with pytest.raises(ValueError, match=f"^{ENV}: expected one of steady, glibc, got 'fast'$"):
        allocator_mode(None, {ENV: "fast"})
    with pytest.raises(ValueError, match="^malloc: expected one of"):
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


# Four 3 MiB tensors made and freed per iteration. Under glibc's defaults the first free raises
# the mmap threshold to 3 MiB and the trim threshold to 6 MiB; from then on an iteration whose
# tensors end up at the top of the heap gives 12 MiB back when they are freed, and the next
# faults them in again (about 3,000 pages), while others fault none, as the heap's history
# goes. Under the steady settings the heap is never trimmed: after the first iterations no page
# is faulted. A tensor's pages: 768.
_FAULTS = """
import resource, torch
def it():
    xs = [torch.ones(3 << 18) for _ in range(4)]
    return float(sum(x[-1] for x in xs))
for _ in range(10):
    it()
f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(40):
    it()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0)
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc settings")
def test_steady_settings_stop_the_page_faults_of_freed_tensors() -> None:
    pytest.importorskip("torch")
    faults = {}
    for mode in ("glibc", "steady"):
        env = allocator_env(dict(os.environ), mode)
        out = subprocess.run([sys.executable, "-c", _FAULTS], env=env, capture_output=True,
                             text=True, check=True, timeout=120)
        faults[mode] = int(out.stdout.strip())
    tensor = (3 << 20) // 4096
    assert faults["glibc"] >= 10 * tensor, faults
    assert faults["steady"] <= tensor, faults
