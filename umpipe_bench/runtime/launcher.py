"""Launch one process per stage with ``torchrun`` and watch it (docs/MODEL.md §5).

Process launching is torch's job (``torch.distributed.run --standalone``: a free port, one
worker per stage, a failed worker stops the others). This module adds what a benchmark needs
around it: a deadline (watchdog), a sweep that kills every process of the run that is still
alive afterwards (found by a run id in its environment, so only our own processes), and an
error that names the stage that failed first.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from .allocator import allocator_env, allocator_mode
from .errors import RunTimeout, StageFailure
from .lifetime import child_setup
from .spec import RunSpec
from .torch_schedules import TorchMultiSpec

__all__ = ["RUN_ID_ENV", "launch", "run_processes", "sweep"]

RUN_ID_ENV = "UMPIPE_RUN_ID"
_REPO_ROOT = Path(__file__).resolve().parents[2]


def run_processes(run_id: str) -> list[int]:
    """Pids of live processes (other than this one) whose environment carries ``run_id``."""
    needle = f"{RUN_ID_ENV}={run_id}".encode()
    me = os.getpid()
    found = []
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit() or int(entry.name) == me:
            continue
        try:
            with open(f"/proc/{entry.name}/environ", "rb") as fh:
                env = fh.read()
            with open(f"/proc/{entry.name}/stat", "rb") as fh:
                state = fh.read().rsplit(b")", 1)[1].split()[0]
        except OSError:
            continue
        if state != b"Z" and needle in env.split(b"\0"):
            found.append(int(entry.name))
    return found


#: Seconds the run's processes get to exit after SIGTERM when a signal ends the launch
#: (then SIGKILL): the command must end within a second.
INTERRUPT_GRACE_S = 0.3


def sweep(run_id: str, grace_s: float = 2.0) -> int:
    """SIGTERM, then SIGKILL, every process of the run still alive; returns how many."""
    pids = run_processes(run_id)
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    deadline = time.monotonic() + grace_s
    while pids and time.monotonic() < deadline:
        time.sleep(0.05)
        pids = [p for p in pids if p in set(run_processes(run_id))]
    for pid in pids:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    return len(pids)


def _torchrun_failures(log: str) -> dict[int, int]:
    """``rank -> exit code`` from torchrun's failure summary (negative: killed by a signal)."""
    out: dict[int, int] = {}
    for m in re.finditer(
        r"rank\s*:\s*(\d+)\s*\(local_rank[^)]*\)\s*\n\s*exitcode\s*:\s*(-?\d+)", log
    ):
        out.setdefault(int(m.group(1)), int(m.group(2)))
    return out


def _diagnose(out_dir: Path, log: str) -> tuple[int | None, str]:
    """Name the stage that failed first and say why.

    In order: a stage that raised a Python error of its own; a stage that died without one
    (``os._exit``, a crash, the OOM killer); a stage its neighbours lost contact with (a hang
    ends in their receive timeouts, then torchrun stops it); otherwise the first report.
    """
    errors: list[dict[str, Any]] = []
    for path in sorted(out_dir.glob("error-stage*.json")):
        try:
            errors.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, json.JSONDecodeError):
            continue
    errors.sort(key=lambda e: e.get("time", 0.0))
    primary = [e for e in errors if not e.get("secondary")]
    if primary:
        e = primary[0]
        return int(e["stage"]), f"{e['type']}: {e['message']}"
    reported = {int(e["stage"]) for e in errors}
    exits = _torchrun_failures(log)
    died = [r for r, code in exits.items() if r not in reported and code not in (-15, -9)]
    if died:
        r = died[0]
        why = f"its process died (exit code {exits[r]}) without raising a Python error"
        if errors:
            why += f"; then {errors[0]['message']}"
        return r, why
    lost = [int(e["peer"]) for e in errors if e.get("peer") is not None]
    lost = [p for p in lost if p not in reported]
    if lost:
        return lost[0], f"it stopped responding or died: {errors[0]['message']}"
    if errors:
        e = errors[0]
        return int(e["stage"]), f"{e['type']}: {e['message']}"
    return None, "torchrun failed before any stage reported an error; see the log"


def launch(
    spec: RunSpec | TorchMultiSpec,
    run_dir: str | os.PathLike[str],
    *,
    deadline_s: float = 3600.0,
    extra_env: dict[str, str] | None = None,
    echo: bool = False,
    stage_args: Sequence[str] = (),
    malloc: str | None = None,
) -> dict[str, Any]:
    """Run ``spec`` with ``torchrun`` on this host, one process per stage; return rank 0's result.

    ``spec`` is a :class:`RunSpec`, or any spec with ``run_id``, ``S`` (processes),
    ``threads``, ``out_dir`` and ``save(path)`` whose stage entry point ``stage_args`` selects
    (``["--torch-multi"]``: a :class:`~.torch_schedules.TorchMultiSpec`).

    ``malloc``: the C allocator settings of the stage processes (:mod:`.allocator`: ``steady``
    or ``glibc``; default ``UMPIPE_MALLOC``, else ``steady``), kept in the result as ``malloc``.

    Raises :class:`StageFailure` naming the failed stage, or :class:`RunTimeout` after
    ``deadline_s``. Either way no process of the run survives this call.
    """
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    spec.out_dir = str(run_dir)
    spec_path = run_dir / "spec.json"
    spec.save(spec_path)
    log_path = run_dir / "torchrun.log"
    mode = allocator_mode(malloc)
    env = dict(os.environ)
    env.update(extra_env or {})
    allocator_env(env, mode)
    env[RUN_ID_ENV] = spec.run_id
    env["OMP_NUM_THREADS"] = str(spec.threads)
    env["PYTHONPATH"] = os.pathsep.join(
        p for p in (str(_REPO_ROOT), env.get("PYTHONPATH", "")) if p
    )
    env.setdefault("TORCH_CPP_LOG_LEVEL", "ERROR")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        f"--nproc-per-node={spec.S}",
        "--max-restarts=0",
        "--monitor-interval=0.1",
        "-m",
        "umpipe_bench.runtime.stage_main",
        *stage_args,
        "--spec",
        str(spec_path),
    ]
    started = time.monotonic()
    try:
        with open(log_path, "w", encoding="utf-8") as log:
            proc = subprocess.Popen(
                cmd,
                stdout=None if echo else log,
                stderr=subprocess.STDOUT if not echo else None,
                env=env,
                cwd=str(_REPO_ROOT),
                start_new_session=True,  # own group: os.killpg reaches torchrun's workers
                preexec_fn=child_setup(os.getpid(), new_group=False),
            )
            try:
                rc = proc.wait(timeout=deadline_s)
            except subprocess.TimeoutExpired:
                os.killpg(proc.pid, signal.SIGKILL)
                proc.wait()
                sweep(spec.run_id)
                raise RunTimeout(
                    None,
                    f"the run exceeded its deadline of {deadline_s:g} s and was killed",
                    str(log_path),
                ) from None
    except KeyboardInterrupt:  # SIGINT/SIGTERM: the run's processes go within a second
        sweep(spec.run_id, grace_s=INTERRUPT_GRACE_S)
        raise
    finally:
        sweep(spec.run_id)
    text = log_path.read_text(encoding="utf-8", errors="replace") if log_path.exists() else ""
    if rc != 0:
        stage, why = _diagnose(run_dir, text)
        raise StageFailure(stage, why, str(log_path))
    result_path = run_dir / "result.json"
    if not result_path.exists():
        raise StageFailure(0, "torchrun succeeded but stage 0 wrote no result.json", str(log_path))
    result = json.loads(result_path.read_text(encoding="utf-8"))
    result["launch_s"] = time.monotonic() - started
    result["malloc"] = mode
    return result
