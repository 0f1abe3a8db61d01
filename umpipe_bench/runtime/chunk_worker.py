"""One device's process of a chunk-plan launch: ``python -m umpipe_bench.runtime.stage_main
--chunks --spec run.json`` (docs/EXECUTE.md, "Chunk plans").

Started by the launcher through ``torchrun``, one process per device (rank = device). It builds
the model once (same seed and dtype on every rank, so the same parameters as the
single-process reference), learns every layer boundary's per-sample shape from one sample run
through the whole model on its own (both ends of every stream then know each message's shape
without asking), keeps the layers its chunks use, and creates one communicator per stream
slot (:func:`.chunk_job.stream_slots`; every rank creates them all, in one order). Then it
times every entry alternately (``A B A B ...``) after warm-up rounds, as
:mod:`.worker` does for stage plans, and rank 0 writes ``result.json``: per entry the
iteration times (slowest device), each device's compute and wait, the loss, and the messages
each stream carried in the last iteration, counted at both ends.

A failure writes ``error-stage<rank>.json`` and exits at once (:func:`.worker.run_rank_main`):
the launcher names the device that failed first, and the message names the chunk and action.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import socket
import sys
import time
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import nn

from .chunk_executor import ChunkLinks, DeviceRunner, LocalLink, Outlet, Receive
from .chunk_job import ChunkEntry, ChunkRunSpec, stream_slots, streams
from .comm import KIND_ACT, KIND_GRAD, Channel, Prefetcher
from .errors import PlanRefused
from .executor import IterStats
from .stages import parse_dtype
from .worker import FAULT_ENV, _check_same_spec, _device, _optimizer, run_rank_main

__all__ = ["main", "run_device"]

_KIND = {"act": KIND_ACT, "grad": KIND_GRAD}
Shape = tuple[tuple[int, ...], torch.dtype]


def _fault_hook(rank: int) -> Callable[[], None] | None:
    """Test hook: ``UMPIPE_FAULT=<raise|exit|hang>:<device>[:<action number>]`` (actions
    counted over the whole run on that device, from 0)."""
    text = os.environ.get(FAULT_ENV, "")
    if not text:
        return None
    parts = text.split(":")
    kind, who = parts[0], int(parts[1])
    at = int(parts[2]) if len(parts) > 2 else 0
    if kind not in ("raise", "exit", "hang"):
        raise ValueError(f"{FAULT_ENV}={text!r}: chunk runs know raise, exit and hang")
    if who != rank:
        return None
    count = [0]

    def hook() -> None:
        n, count[0] = count[0], count[0] + 1
        if n != at:
            return
        if kind == "raise":
            raise RuntimeError(f"injected fault at device {rank}, action {n}")
        if kind == "exit":
            os._exit(3)
        while True:
            time.sleep(1.0)

    return hook


def _layer_shapes(layers: list[nn.Module], sample: torch.Tensor) -> list[Shape]:
    """Per-sample shape and dtype of every layer's output (one sample, no grad)."""
    out: list[Shape] = []
    x = sample
    with torch.no_grad():
        for i, layer in enumerate(layers):
            x = layer(x)
            if not isinstance(x, torch.Tensor):
                raise TypeError(f"layer {i}: output is {type(x).__name__}; chunks must map one "
                                "tensor to one tensor")
            out.append((tuple(x.shape[1:]), x.dtype))
    return out


class _Counted:
    """Messages one end of a stream handled this iteration."""

    def __init__(self) -> None:
        self.count = 0


class _ChannelOutlet(_Counted):
    """The sending end of a stream between devices: checked, asynchronous sends."""

    def __init__(self, channel: Channel, kind: int, shape: Shape) -> None:
        super().__init__()
        self.channel, self.kind, self.shape = channel, kind, shape

    def push(self, y: torch.Tensor, j: int, a: int, b: int) -> None:
        self.channel.send(y, self.kind, j, a, b, expect=self.shape)
        self.count += 1


class _EntryWiring:
    """One entry on this device: its chunk modules, and its channels (made once)."""

    def __init__(self, entry: ChunkEntry, slots: dict[tuple[int, str], int], rank: int,
                 layers: dict[int, nn.Module], shapes: list[Shape], groups: list[Any],
                 device: torch.device) -> None:
        self.entry = entry
        self.rank = rank
        self.mine = [c for c in range(entry.C) if entry.devices[c] == rank]
        self.modules = {c: nn.Sequential(*(layers[i] for i in entry.layers[c]))
                        for c in self.mine}
        self.streams = [s for s in streams(entry) if rank in (s.src, s.dst)]
        self.channels: dict[tuple[int, str], Channel] = {}
        self.shapes: dict[int, Shape] = {c: shapes[entry.layers[c][-1]]
                                         for c in range(entry.C - 1)}
        for s in self.streams:
            peer = s.dst if s.src == rank else s.src
            self.channels[(s.boundary, s.kind)] = Channel(
                rank, peer, device, {_KIND[s.kind]: groups[slots[(s.boundary, s.kind)]]})

    def runner(self, spec: ChunkRunSpec, loss_fn: Callable[..., torch.Tensor],
               inputs: torch.Tensor | None, targets: torch.Tensor | None,
               hook: Callable[[], None] | None, prefetch: bool
               ) -> tuple[DeviceRunner, list[Prefetcher], dict[str, _Counted]]:
        """A fresh runner for one iteration, its receive threads and its stream counters
        (``"<boundary>:<kind>:sent"`` / ``":received"``)."""
        e, rank = self.entry, self.rank
        box: list[DeviceRunner] = []
        prefetchers: list[Prefetcher] = []
        counters: dict[str, _Counted] = {}
        local: dict[tuple[int, str], LocalLink] = {}

        def local_link(b: int, kind: str) -> LocalLink:
            src, dst = (b, b + 1) if kind == "act" else (b + 1, b)
            what = "activations" if kind == "act" else "gradients"
            return local.setdefault((b, kind), LocalLink(
                f"device {rank}: {what} of chunk {src} for chunk {dst}"))

        def incoming(c: int, kind: str, sizes: list[int]) -> Receive:
            """``receive(k, a, b)`` of the stream of ``kind`` entering chunk ``c``."""
            b = c - 1 if kind == "act" else c
            if e.devices[c - 1 if kind == "act" else c + 1] == rank:
                return local_link(b, kind).receive
            ch, code = self.channels[(b, kind)], _KIND[kind]
            tail, dt = self.shapes[b]
            got = counters[f"{b}:{kind}:received"] = _Counted()
            ranges, a = [], 0
            for m in sizes:
                ranges.append((a, a + m))
                a += m
            if prefetch:
                pf = Prefetcher(ch, code, ranges, tail, dt)
                prefetchers.append(pf)

                def fetch(k: int, a: int, b: int) -> torch.Tensor:
                    return pf.get(k, a, b, context=f"for {box[0].current}")
            else:
                def fetch(k: int, a: int, b: int) -> torch.Tensor:
                    return ch.recv(code, k, a, b, tail, dt, context=f"for {box[0].current}")

            def receive(k: int, a: int, b: int) -> torch.Tensor:
                got.count += 1
                return fetch(k, a, b)
            return receive

        def outgoing(c: int, kind: str) -> Outlet:
            b = c if kind == "act" else c - 1
            if e.devices[c + 1 if kind == "act" else c - 1] == rank:
                return local_link(b, kind)
            out = _ChannelOutlet(self.channels[(b, kind)], _KIND[kind], self.shapes[b])
            counters[f"{b}:{kind}:sent"] = out
            return out

        links: dict[int, ChunkLinks] = {}
        C = e.C
        for c in self.mine:
            links[c] = ChunkLinks(
                acts=incoming(c, "act", e.fwd[c - 1]) if c > 0 else None,
                act_sizes=e.fwd[c - 1] if c > 0 else (),
                grads=incoming(c, "grad", e.bwd[c + 1]) if c < C - 1 else None,
                grad_sizes=e.bwd[c + 1] if c < C - 1 else (),
                act_out=outgoing(c, "act") if c < C - 1 else None,
                grad_out=outgoing(c, "grad") if c > 0 else None)
        runner = DeviceRunner(rank, e, self.modules, links, spec.B, loss_fn,
                              inputs if 0 in self.mine else None,
                              targets if C - 1 in self.mine else None, before_op=hook)
        box.append(runner)
        return runner, prefetchers, counters

    def finish(self, prefetchers: list[Prefetcher]) -> float:
        """Wait for the receive threads and the last sends; the seconds it took."""
        t = time.perf_counter()
        for pf in prefetchers:
            pf.join()
        for ch in self.channels.values():
            ch.wait()
        return time.perf_counter() - t


def run_device(spec: ChunkRunSpec, rank: int, world: int) -> dict[str, Any] | None:
    """Run this device's chunks for every entry; rank 0 returns (and writes) the results."""
    from umpipe_bench.problems.models import get_model

    if world != spec.D:
        raise PlanRefused(f"launched with WORLD_SIZE={world} but the chunk plans are for "
                          f"D={spec.D} devices (one process per device)")
    torch.set_num_threads(max(1, spec.threads))
    device = _device(spec.backend)
    if spec.backend == "nccl":
        torch.cuda.set_device(device)
    timeout = timedelta(seconds=spec.timeout_s)
    if not dist.is_initialized():
        dist.init_process_group(spec.backend, timeout=timeout)
    _check_same_spec(spec, rank, world, device)  # type: ignore[arg-type]
    model = get_model(spec.model)
    dtype = parse_dtype(spec.dtype)
    built = model.build(dict(spec.config), dtype, spec.seed)
    inputs, targets = model.sample_batch(spec.B, dict(spec.config), spec.seed, dtype)
    for e in spec.entries:
        if sorted(i for g in e.layers for i in g) != list(range(len(built))):
            raise PlanRefused(f"chunk plan {e.label!r}: its chunks hold layers "
                              f"{e.layers} but {spec.model} has {len(built)} layers")
    shapes = _layer_shapes([m.train() for m in built], inputs[:1])
    used = {i for e in spec.entries for c in range(e.C) if e.devices[c] == rank
            for i in e.layers[c]}
    layers = {i: built[i].to(device).train() for i in sorted(used)}
    del built
    pairs, slots = stream_slots(spec.entries)
    groups = [dist.new_group(sorted({a, b}), timeout=timeout) for a, b in pairs]
    wirings = [_EntryWiring(e, slots[k], rank, layers, shapes, groups, device)
               for k, e in enumerate(spec.entries)]
    holds_first = [0 in w.mine for w in wirings]
    holds_last = [e.C - 1 in w.mine for e, w in zip(spec.entries, wirings)]
    x_dev = inputs.to(device) if any(holds_first) else None
    y_dev = targets.to(device) if any(holds_last) else None
    params = [p for m in layers.values() for p in m.parameters() if p.requires_grad]
    opt = _optimizer(spec.optimizer, params, spec.lr)
    hook = _fault_hook(rank)
    prefetch = spec.prefetch and spec.backend == "gloo"
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    out_dir = Path(spec.out_dir)
    E, N = len(spec.entries), spec.iters
    record = torch.full((E, max(N, 1), 4), float("nan"), dtype=torch.float64)
    counts: list[dict[str, int]] = [{} for _ in spec.entries]
    gc.collect()
    gc.freeze()
    for it in range(spec.warmup + N):
        for k, w in enumerate(wirings):
            gc.collect()
            dist.barrier()
            gc.disable()
            try:
                t0 = time.perf_counter()
                for p in params:
                    p.grad = None
                runner, pfs, counters = w.runner(spec, model.loss, x_dev, y_dev, hook, prefetch)
                stats = runner.run(w.entry.lists[rank])
                stats.wait_s += w.finish(pfs)
                if spec.dump_grads and it == spec.warmup:
                    _dump_grads(out_dir, k, rank, w, stats)
                t_opt = time.perf_counter()
                if opt is not None:
                    opt.step()
                sync()
                t1 = time.perf_counter()
            finally:
                gc.enable()
            counts[k] = {key: c.count for key, c in counters.items()}
            if it >= spec.warmup:
                loss = stats.loss if stats.loss is not None else float("nan")
                record[k, it - spec.warmup] = torch.tensor(
                    [t1 - t0, stats.compute_s + (t1 - t_opt), stats.wait_s, loss],
                    dtype=torch.float64)
    gathered = [torch.zeros_like(record) for _ in range(world)]
    if spec.backend == "nccl":
        dev_rec = record.to(device)
        dev_all = [torch.zeros_like(dev_rec) for _ in range(world)]
        dist.all_gather(dev_all, dev_rec)
        gathered = [g.cpu() for g in dev_all]
    else:
        dist.all_gather(gathered, record)
    every_count: list[Any] = [None] * world
    dist.all_gather_object(every_count, counts)
    result = None
    if rank == 0:
        result = _result(spec, torch.stack(gathered), every_count)
        tmp = out_dir / "result.json.tmp"
        tmp.write_text(json.dumps(result) + "\n", encoding="utf-8")
        os.replace(tmp, out_dir / "result.json")
    dist.barrier()
    return result


def _dump_grads(out_dir: Path, k: int, rank: int, w: _EntryWiring, stats: IterStats) -> None:
    """This device's gradients of entry ``k`` per chunk (``{chunk: {name: grad}}``)."""
    grads = {c: {name: (p.grad.detach().cpu().clone() if p.grad is not None else None)
                 for name, p in w.modules[c].named_parameters()} for c in w.mine}
    torch.save({"grads": grads, "loss": stats.loss}, out_dir / f"grads-e{k}-d{rank}.pt")


def _result(spec: ChunkRunSpec, allr: torch.Tensor, counts: list[Any]) -> dict[str, Any]:
    """Rank 0's summary, in the form :func:`.report.summarize` reads."""
    world = allr.shape[0]
    entries = []
    for k, e in enumerate(spec.entries):
        wall = allr[:, k, : spec.iters, 0]
        last = e.devices[-1]
        messages = []
        for s in streams(e):
            messages.append({
                "boundary": s.boundary, "kind": s.kind, "src": s.src, "dst": s.dst,
                "expected": s.messages,
                "sent": counts[s.src][k].get(f"{s.boundary}:{s.kind}:sent"),
                "received": counts[s.dst][k].get(f"{s.boundary}:{s.kind}:received")})
        entries.append({
            "label": e.label, "engine": "umpipe", "schedule": "chunk", "mode": e.mode,
            "split": e.split, "devices": e.devices, "layers": e.layers,
            "times": wall.max(dim=0).values.tolist(),
            "stage_wall": wall.tolist(),
            "stage_compute": allr[:, k, : spec.iters, 1].tolist(),
            "stage_wait": allr[:, k, : spec.iters, 2].tolist(),
            "loss": allr[last, k, : spec.iters, 3].tolist(),
            "messages": messages,
        })
    return {
        "run_id": spec.run_id, "problem": spec.problem, "world_size": world,
        "backend": spec.backend, "torch": torch.__version__, "threads": spec.threads,
        "host": socket.gethostname(), "iters": spec.iters, "warmup": spec.warmup,
        "entries": entries,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point of one device's process (``RANK`` / ``WORLD_SIZE`` from ``torchrun``)."""
    parser = argparse.ArgumentParser(
        prog="python -m umpipe_bench.runtime.stage_main --chunks",
        description="One device of an umpipe-bench execute run of chunk plans (torchrun).")
    parser.add_argument("--spec", required=True, help="run spec JSON written by the launcher")
    args = parser.parse_args(argv)
    return run_rank_main(ChunkRunSpec.load(args.spec), run_device, "device")


if __name__ == "__main__":
    sys.exit(main())
