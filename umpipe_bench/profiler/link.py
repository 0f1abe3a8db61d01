"""Link calibration: a short ping-pong between two local processes (docs/MODEL.md §1, §5).

Two processes started with ``torch.multiprocessing.spawn`` join a ``torch.distributed`` group
(gloo on CPU tensors, or NCCL on two GPUs) and bounce messages of several sizes back and
forth. Rank 0 times each round trip; the one-way time is half of it. The medians per size are
fitted to ``latency + bytes / bandwidth`` by least squares (:func:`fit_link`), the same form the
problem's links use (``comm(s, m) = lat + m * bytes[s] / bw``).

Threads: ``mp.spawn`` does not set ``OMP_NUM_THREADS`` (torchrun sets it to 1), so the
children get it explicitly from ``threads`` and call ``torch.set_num_threads`` too.
"""

from __future__ import annotations

import json
import os
import socket
import statistics
import tempfile
import time
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Any

from ..errors import ProfileError
from .linkfit import fit_link

__all__ = ["DEFAULT_MESSAGE_BYTES", "LinkCalibration", "calibrate_link"]

DEFAULT_MESSAGE_BYTES: tuple[int, ...] = (4 << 10, 64 << 10, 256 << 10, 1 << 20, 4 << 20, 16 << 20)


@dataclass(frozen=True)
class LinkCalibration:
    """A fitted link and the measurements behind it."""

    latency: float
    bandwidth: float
    method: str
    message_bytes: tuple[int, ...] = ()
    one_way_median_s: tuple[float, ...] = ()
    one_way_noise: tuple[float, ...] = ()
    round_trips: int = 0
    details: dict[str, Any] = field(default_factory=dict)

    def to_provenance(self) -> dict[str, Any]:
        return {
            "method": self.method,
            "latency_s": self.latency,
            "bandwidth_Bps": self.bandwidth,
            "message_bytes": list(self.message_bytes),
            "one_way_median_s": list(self.one_way_median_s),
            "one_way_noise": list(self.one_way_noise),
            "round_trips_per_size": self.round_trips,
            **self.details,
        }


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _pingpong_worker(
    rank: int,
    port: int,
    backend: str,
    message_bytes: tuple[int, ...],
    round_trips: int,
    warmup: int,
    threads: int,
    out_path: str,
) -> None:
    import torch
    import torch.distributed as dist

    from ..runtime.lifetime import die_with_parent

    die_with_parent()  # killed with the profile, even by SIGKILL

    torch.set_num_threads(threads)
    device = torch.device(f"cuda:{rank}") if backend == "nccl" else torch.device("cpu")
    if device.type == "cuda":
        torch.cuda.set_device(device)
    dist.init_process_group(
        backend,
        init_method=f"tcp://127.0.0.1:{port}",
        rank=rank,
        world_size=2,
        timeout=timedelta(seconds=60),
    )
    try:
        results: dict[str, list[float]] = {}

        def sync() -> None:
            if device.type == "cuda":
                torch.cuda.synchronize(device)

        for nbytes in message_bytes:
            buf = torch.ones(max(1, nbytes // 4), dtype=torch.float32, device=device)
            times: list[float] = []
            for i in range(warmup + round_trips):
                sync()
                t0 = time.perf_counter()
                if rank == 0:
                    dist.send(buf, dst=1)
                    dist.recv(buf, src=1)
                else:
                    dist.recv(buf, src=0)
                    dist.send(buf, dst=0)
                sync()
                if i >= warmup:
                    times.append((time.perf_counter() - t0) / 2)
            results[str(buf.numel() * 4)] = times
        if rank == 0:
            with open(out_path, "w", encoding="utf-8") as fh:
                json.dump(results, fh)
        dist.barrier()
    finally:
        dist.destroy_process_group()


def _pingpong(
    threads: int, backend: str, message_bytes: tuple[int, ...], round_trips: int, warmup: int
) -> dict[str, list[float]]:
    import torch.multiprocessing as mp

    saved = os.environ.get("OMP_NUM_THREADS")
    os.environ["OMP_NUM_THREADS"] = str(threads)
    try:
        with tempfile.TemporaryDirectory(prefix="umpipe-link-") as tmp:
            out_path = os.path.join(tmp, "pingpong.json")
            args = (_free_port(), backend, message_bytes, round_trips, warmup, threads, out_path)
            ctx = mp.spawn(_pingpong_worker, args=args, nprocs=2, join=False)
            try:
                while not ctx.join(timeout=0.1):
                    pass
            except BaseException:  # a failed worker, SIGINT, SIGTERM: none of them stays
                for proc in ctx.processes:
                    if proc.is_alive():
                        proc.kill()
                    proc.join()
                raise
            with open(out_path, encoding="utf-8") as fh:
                return json.load(fh)
    finally:
        if saved is None:
            os.environ.pop("OMP_NUM_THREADS", None)
        else:
            os.environ["OMP_NUM_THREADS"] = saved


def calibrate_link(
    *,
    threads: int = 1,
    backend: str = "gloo",
    message_bytes: tuple[int, ...] = DEFAULT_MESSAGE_BYTES,
    round_trips: int = 40,
    warmup: int = 3,
    attempts: int = 3,
) -> LinkCalibration:
    """Ping-pong between two spawned local processes and fit ``latency + bytes / bandwidth``.

    ``backend`` ``gloo`` moves CPU tensors; ``nccl`` needs two GPUs (``cuda:0`` and ``cuda:1``).
    Takes a few seconds (mostly starting the processes). On a busy machine the medians can fail
    to grow with size (no bandwidth can be fitted); then the ping-pong is repeated with 4x
    larger messages, up to ``attempts`` times in all, and the failures are recorded.
    """
    if backend not in ("gloo", "nccl"):
        raise ProfileError(f"link backend must be 'gloo' or 'nccl', got {backend!r}")
    if round_trips < 1:
        raise ProfileError(f"round_trips must be >= 1, got {round_trips}")
    messages = tuple(int(b) for b in message_bytes)
    failures: list[str] = []
    for attempt in range(attempts):
        raw = _pingpong(threads, backend, messages, round_trips, warmup)
        sizes = tuple(int(k) for k in raw)
        medians = tuple(statistics.median(v) for v in raw.values())
        noise = tuple(max(v) / min(v) for v in raw.values())
        try:
            lat, bw = fit_link(sizes, medians)
        except ValueError as exc:
            failures.append(f"attempt {attempt + 1} with {list(sizes)} bytes: {exc}")
            messages = tuple(4 * b for b in messages)
            continue
        return LinkCalibration(
            latency=lat,
            bandwidth=bw,
            method=f"{backend} ping-pong between 2 local processes (torch.multiprocessing."
            f"spawn), one-way = round trip / 2, median of {round_trips} after {warmup} "
            "warm-up, least-squares fit of latency + bytes / bandwidth on relative errors",
            message_bytes=sizes,
            one_way_median_s=medians,
            one_way_noise=noise,
            round_trips=round_trips,
            details={"threads_per_process": threads, "backend": backend, "failed": failures},
        )
    raise ProfileError("link calibration failed; " + "; ".join(failures))
