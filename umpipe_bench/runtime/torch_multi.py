"""One rank of a torch-schedules launch: every entry's ``PipelineStage`` chunks and schedule on
this rank, timed round by round in a rotating order (docs/MODEL.md §5).

Started by the launcher as ``python -m umpipe_bench.runtime.stage_main --torch-multi --spec
run.json`` (one process per rank, ``torchrun``). Each rank builds the whole model once (same
seed and dtype on every rank, so the same parameters as the single-process reference) and
makes each entry's chunks as ``nn.Sequential`` views of those layers: entries share the
parameters, so holding many entries costs no extra parameter memory. The loss is
``sum / B`` with ``scale_grads=False``: the gradient of every entry is the full-batch gradient
(docs/MODEL.md §5). One optimizer per rank covers all layers; it only steps the parameters
that received a gradient (every gradient is reset to ``None`` before an iteration), i.e.
this rank's chunks of the entry just run.

The spec's ``chunks`` (chunk plans) run in the same launch through the runtime's own
executor (:class:`ChunkPlanRunner`: :mod:`.chunk_worker`'s wiring on the same layer objects,
its streams on communicators of their own), after the torch entries in the entry order.

Round ``k`` runs every entry once, starting at entry ``k mod E``, so drift of the machine hits
all entries alike. An iteration is timed on every rank from a barrier to the end of its own
step and optimizer update; the iteration's time is the slowest rank's.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import resource
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

from ..layout import device_chunks
from .allocator import STEADY
from .chunk_job import ChunkEntry, stream_slots
from .chunk_worker import _EntryWiring, _layer_shapes
from .errors import PlanRefused
from .stages import parse_dtype
from .torch_schedules import TorchEntry, TorchMultiSpec, chunk_layers
from .worker import FAULT_ENV, _optimizer, run_rank_main

__all__ = ["ChunkPlanRunner", "TorchScheduleRunner", "main", "run_rank"]


class TorchScheduleRunner:
    """One entry on one rank: its chunks as ``PipelineStage`` objects and the schedule."""

    def __init__(
        self,
        entry: TorchEntry,
        rank: int,
        D: int,
        B: int,
        layers: list[nn.Module],
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        device: torch.device,
        inputs: torch.Tensor,
        targets: torch.Tensor,
    ) -> None:
        import torch.distributed.pipelining as pp

        self.entry = entry
        kind = entry.kind
        C = len(entry.partition)
        groups = chunk_layers(entry.partition)
        self.chunks = list(device_chunks(kind.layout, D, entry.v)[rank])
        self.layer_ids = [i for c in self.chunks for i in groups[c]]
        self.first = 0 in self.chunks
        self.last = C - 1 in self.chunks
        self.inputs = inputs if self.first else None
        self.targets = targets if self.last else None
        stages = [
            pp.PipelineStage(nn.Sequential(*(layers[i] for i in groups[c])), c, C, device)
            for c in self.chunks
        ]

        def loss(out: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            return loss_fn(out, tgt) / B

        cls = getattr(pp, entry.torch_class)
        target = stages[0] if kind.single else stages
        self.schedule = cls(target, entry.M, loss_fn=loss, scale_grads=False)

    def step(self) -> float | None:
        """One iteration; on the rank holding the last chunk, the loss (sum over
        microbatches of ``sum / B``, i.e. the full-batch loss)."""
        losses: list[torch.Tensor] = []
        args = (self.inputs,) if self.first else ()
        if self.last:
            self.schedule.step(*args, target=self.targets, losses=losses, return_outputs=False)
            return float(sum(float(x.detach()) for x in losses))
        self.schedule.step(*args, return_outputs=False)
        return None


class ChunkPlanRunner:
    """One chunk plan on one rank, run by the runtime's executor (:mod:`.chunk_worker`), with
    the interface of :class:`TorchScheduleRunner`."""

    def __init__(self, wiring: _EntryWiring, spec: TorchMultiSpec, rank: int,
                 loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                 inputs: torch.Tensor, targets: torch.Tensor) -> None:
        self.entry: ChunkEntry = wiring.entry
        self.wiring, self.spec, self.rank, self.loss_fn = wiring, spec, rank, loss_fn
        self.inputs, self.targets = inputs, targets
        self.layer_ids = [i for c in wiring.mine for i in self.entry.layers[c]]
        self.prefetch = spec.prefetch and spec.backend == "gloo"

    def step(self) -> float | None:
        """One iteration; on the rank holding the last chunk, the full-batch loss."""
        runner, prefetchers, _ = self.wiring.runner(self.spec, self.loss_fn, self.inputs,
                                                    self.targets, None, self.prefetch)
        stats = runner.run(self.entry.lists[self.rank])
        self.wiring.finish(prefetchers)
        return stats.loss


def _chunk_runners(spec: TorchMultiSpec, rank: int, layers: list[nn.Module],
                   loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
                   device: torch.device, inputs: torch.Tensor, targets: torch.Tensor
                   ) -> list[ChunkPlanRunner]:
    """The spec's chunk plans on this rank (every rank creates every stream's communicator,
    in one order)."""
    if not spec.chunks:
        return []
    n = len(layers)
    for c in spec.chunks:
        if sorted(i for g in c.layers for i in g) != list(range(n)):
            raise PlanRefused(f"chunk plan {c.label!r}: its chunks hold layers {c.layers} but "
                              f"{spec.model} has {n} layers")
    shapes = _layer_shapes(layers, inputs[:1])
    pairs, slots = stream_slots(spec.chunks)
    timeout = timedelta(seconds=spec.timeout_s)
    groups = [dist.new_group(sorted({a, b}), timeout=timeout) for a, b in pairs]
    held = dict(enumerate(layers))
    return [ChunkPlanRunner(_EntryWiring(c, slots[k], rank, held, shapes, groups, device),
                            spec, rank, loss_fn, inputs, targets)
            for k, c in enumerate(spec.chunks)]


def _fault(rank: int) -> None:
    """Test hook: ``UMPIPE_FAULT=raise:<rank>`` or ``hang:<rank>`` before the first round."""
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return
    kind, _, who = spec.partition(":")
    if int(who.split(":")[0]) != rank:
        return
    if kind == "raise":
        raise RuntimeError(f"injected fault at rank {rank}")
    if kind == "hang":
        while True:
            time.sleep(1.0)
    raise ValueError(f"{FAULT_ENV}={spec!r}: torch-multi runs know only raise and hang")


def run_rank(spec: TorchMultiSpec, rank: int, world: int) -> dict[str, Any] | None:
    """Build every entry on this rank, run warm-up then timed rounds; rank 0 returns (and
    writes ``result.json``) the results."""
    from umpipe_bench.problems.models import get_model

    if world != spec.D:
        raise ValueError(f"launched with WORLD_SIZE={world} but the spec has D={spec.D} ranks")
    torch.set_num_threads(max(1, spec.threads))
    device = torch.device("cpu")
    if spec.backend == "nccl":
        device = torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(spec.backend, timeout=timedelta(seconds=spec.timeout_s))
    model = get_model(spec.model)
    dtype = parse_dtype(spec.dtype)
    layers = [m.to(device).train() for m in model.build(dict(spec.config), dtype, spec.seed)]
    for e in spec.entries:
        if sum(e.partition) != len(layers):
            raise PlanRefused(f"entry {e.label!r}: partition {e.partition} covers "
                              f"{sum(e.partition)} layers but {spec.model} has {len(layers)}")
    inputs, targets = model.sample_batch(spec.B, dict(spec.config), spec.seed, dtype)
    inputs, targets = inputs.to(device), targets.to(device)
    runners: list[TorchScheduleRunner | ChunkPlanRunner] = [
        TorchScheduleRunner(e, rank, spec.D, spec.B, layers, model.loss, device, inputs, targets)
        for e in spec.entries
    ]
    runners += _chunk_runners(spec, rank, layers, model.loss, device, inputs, targets)
    params = [p for m in layers for p in m.parameters() if p.requires_grad]
    opt = _optimizer(spec.optimizer, params, spec.lr)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    out_dir = Path(spec.out_dir)
    E, N = len(runners), spec.rounds
    record = torch.full((E, max(N, 1), 2), float("nan"), dtype=torch.float64)
    orders: list[list[int]] = []
    _fault(rank)
    gc.collect()
    gc.freeze()
    for rnd in range(spec.warmup + N):
        order = [(rnd + j) % E for j in range(E)]
        if rnd >= spec.warmup:
            orders.append(order)
        if rank == 0 and os.environ.get("UMPIPE_PROGRESS"):
            what = "warm-up" if rnd < spec.warmup else "round"
            n = rnd + 1 if rnd < spec.warmup else rnd - spec.warmup + 1
            print(f"[torch-multi] {what} {n}/{spec.warmup if rnd < spec.warmup else N}",
                  file=sys.stderr, flush=True)
        for k in order:
            gc.collect()
            dist.barrier()
            gc.disable()
            try:
                t0 = time.perf_counter()
                for p in params:
                    p.grad = None
                loss = runners[k].step()
                if spec.dump_grads and rnd == spec.warmup:
                    _dump_grads(out_dir, k, rank, layers, runners[k], loss)
                if opt is not None:
                    opt.step()
                sync()
                t1 = time.perf_counter()
            finally:
                gc.enable()
            if rnd >= spec.warmup:
                record[k, rnd - spec.warmup] = torch.tensor(
                    [t1 - t0, float("nan") if loss is None else loss], dtype=torch.float64
                )
    gathered = [torch.zeros_like(record) for _ in range(world)]
    dist.all_gather(gathered, record)
    rss = torch.tensor([resource.getrusage(resource.RUSAGE_SELF).ru_maxrss], dtype=torch.int64)
    every_rss = [torch.zeros_like(rss) for _ in range(world)]
    dist.all_gather(every_rss, rss)
    result = None
    if rank == 0:
        result = _result(spec, torch.stack(gathered), orders)
        result["peak_rss_mib"] = [round(int(x) / 1024, 1) for x in every_rss]
        # the C allocator's variables as the processes started with them (.allocator)
        result["malloc_env"] = {k: os.environ.get(k) for k in STEADY}
        tmp = out_dir / "result.json.tmp"
        tmp.write_text(json.dumps(result) + "\n", encoding="utf-8")
        os.replace(tmp, out_dir / "result.json")
    dist.barrier()
    return result


def _dump_grads(
    out_dir: Path, k: int, rank: int, layers: list[nn.Module],
    runner: TorchScheduleRunner | ChunkPlanRunner, loss: float | None,
) -> None:
    """This rank's gradients of entry ``k``, keyed ``"<layer>.<parameter>"`` (layer = index in
    the whole model), for the correctness check against the full-batch reference."""
    grads = {
        f"{i}.{name}": (p.grad.detach().cpu().clone() if p.grad is not None else None)
        for i in runner.layer_ids
        for name, p in layers[i].named_parameters()
    }
    torch.save({"grads": grads, "loss": loss}, out_dir / f"grads-e{k}-r{rank}.pt")


def _result(
    spec: TorchMultiSpec, allr: torch.Tensor, orders: list[list[int]]
) -> dict[str, Any]:
    """Rank 0's summary: per entry the per-round times (slowest rank) and per-rank times."""
    entries = []
    for k, e in enumerate([*spec.entries, *spec.chunks]):
        wall = allr[:, k, : spec.rounds, 0]  # [rank, round]
        loss = allr[:, k, : spec.rounds, 1]
        holder = [r for r in range(allr.shape[0]) if not torch.isnan(loss[r]).all()]
        if isinstance(e, ChunkEntry):
            what = {"torch_class": None, "M": None, "partition": [len(g) for g in e.layers],
                    "v": None, "engine": "umpipe", "chunk_plan": e.plan,
                    "chunks_per_rank": [[c for c in range(e.C) if e.devices[c] == r]
                                        for r in range(spec.D)]}
        else:
            what = {"torch_class": e.torch_class, "M": e.M, "partition": e.partition,
                    "v": e.v, "chunks_per_rank": [list(cs) for cs in
                                                  device_chunks(e.kind.layout, spec.D, e.v)]}
        entries.append({
            "label": e.label,
            **what,
            "T_pred": e.T_pred,
            "times": wall.max(dim=0).values.tolist(),
            "rank_times": wall.tolist(),
            "loss": loss[holder[0]].tolist() if holder else [],
        })
    return {
        "run_id": spec.run_id,
        "model": spec.model,
        "config": spec.config,
        "B": spec.B,
        "D": spec.D,
        "dtype": spec.dtype,
        "optimizer": spec.optimizer,
        "threads": spec.threads,
        "backend": spec.backend,
        "torch": torch.__version__,
        "host": socket.gethostname(),
        "rounds": spec.rounds,
        "warmup": spec.warmup,
        "orders": orders,
        "entries": entries,
    }


def main(argv: list[str] | None = None) -> int:
    """Entry point of one rank (``RANK`` / ``WORLD_SIZE`` from ``torchrun``)."""
    parser = argparse.ArgumentParser(
        prog="python -m umpipe_bench.runtime.stage_main --torch-multi",
        description="One rank of a torch.distributed.pipelining schedules run (torchrun).",
    )
    parser.add_argument("--spec", required=True, help="spec JSON written by the launcher")
    args = parser.parse_args(argv)
    return run_rank_main(TorchMultiSpec.load(args.spec), run_rank, "rank")
