"""One stage's process: ``python -m umpipe_bench.runtime.worker --spec run.json``.

The runtime contract is docs/MODEL.md §5.

Launched by ``torchrun`` (one process per stage, rank = stage) or called in-process by
``umpipe-bench execute`` when it already runs under ``torchrun``. It builds its stage, checks
the boundary shapes with a one-sample probe, then times every entry of the spec alternately
(``A B A B ...``) after warm-up rounds, and rank 0 writes ``result.json``.

A failure writes ``error-stage<k>.json`` (stage, exception, whether it was only a lost
neighbour) and exits the process at once with status 1, so ``torchrun`` stops the other stages
and the launcher can name the stage that failed first.
"""

from __future__ import annotations

import argparse
import gc
import hashlib
import json
import os
import socket
import sys
import time
import traceback
from collections.abc import Callable
from datetime import timedelta
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist

from .comm import KIND_ACT, KIND_GRAD, KIND_PROBE, Channel
from .errors import PeerLostError, PlanRefused
from .executor import IterStats, StageContext, run_ops
from .spec import Entry, RunSpec
from .stages import build_stages, parse_dtype

__all__ = ["FAULT_ENV", "main", "run_worker"]

#: fault injection for tests: ``"<raise|exit|hang|shape|header>:<stage>[:<op number>]"``;
#: ``shape`` makes the stage's next send carry one extra sample (the sender refuses it),
#: ``header`` makes its next header name the wrong microbatch (the receiver refuses it)
FAULT_ENV = "UMPIPE_FAULT"


def _fault_hook(rank: int, ctx: StageContext) -> Callable[[int], None] | None:
    spec = os.environ.get(FAULT_ENV, "")
    if not spec:
        return None
    parts = spec.split(":")
    kind, stage = parts[0], int(parts[1])
    at = int(parts[2]) if len(parts) > 2 else 0
    if stage != rank:
        return None
    if kind not in ("raise", "exit", "hang", "shape", "header"):
        raise ValueError(f"{FAULT_ENV}={spec!r}: unknown fault kind {kind!r}")

    def hook(n: int) -> None:
        if n != at:
            return
        if kind == "raise":
            raise RuntimeError(f"injected fault at stage {rank}, op {n}")
        if kind == "exit":
            os._exit(3)
        if kind == "hang":
            while True:
                time.sleep(1.0)
        ch = ctx.next if ctx.next is not None else ctx.prev
        if ch is not None:
            ch.corrupt_next = kind

    return hook


_T0 = time.perf_counter()


def _trace(rank: int, what: str) -> None:
    if os.environ.get("UMPIPE_TRACE"):
        print(
            f"[umpipe] stage {rank}: {what} at {time.perf_counter() - _T0:.3f} s", file=sys.stderr
        )


def _device(backend: str) -> torch.device:
    if backend == "nccl":
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", "0")))
    return torch.device("cpu")


def _probe(ctx: StageContext, sample: torch.Tensor | None) -> None:
    """Send one sample through the pipeline to learn each boundary's per-sample shape."""
    if ctx.first:
        assert sample is not None
        x = sample
    else:
        assert ctx.prev is not None
        x = ctx.prev.recv(KIND_PROBE, 0, 0, 1, None, None, context="(shape probe)")
        ctx.in_tail, ctx.in_dtype = tuple(x.shape[1:]), x.dtype
    with torch.no_grad():
        y = ctx.module(x)
    if not isinstance(y, torch.Tensor):
        raise TypeError(
            f"stage {ctx.stage}: output is {type(y).__name__}; stages must map one tensor to one "
            "tensor"
        )
    ctx.out_tail, ctx.out_dtype = tuple(y.shape[1:]), y.dtype
    if not ctx.last:
        assert ctx.next is not None
        ctx.next.send(y, KIND_PROBE, 0, 0, 1)
        ctx.next.wait()


def _check_same_spec(spec: RunSpec, rank: int, world: int, device: torch.device) -> None:
    """Every rank must run the same plans: payload sizes are trusted to agree (see comm)."""
    data = spec.to_dict()
    for key in ("run_id", "out_dir"):
        data.pop(key, None)
    digest = hashlib.sha256(json.dumps(data, sort_keys=True).encode()).digest()
    mine = torch.tensor([int.from_bytes(digest[:7], "big")], dtype=torch.int64, device=device)
    every = [torch.zeros_like(mine) for _ in range(world)]
    dist.all_gather(every, mine)
    odd = [r for r, d in enumerate(every) if int(d) != int(every[0])]
    if odd:
        raise PlanRefused(
            f"stage {odd[0]} was given a different problem, plan or setting than stage 0 (run "
            "spec digests differ); every rank of a torchrun launch needs the same arguments"
        )


def _runner(
    entry: Entry, ctx: StageContext, rank: int, device: torch.device
) -> Callable[[], IterStats]:
    if entry.engine == "torch":
        from .peer import TorchPipelineRunner

        assert entry.M is not None
        tp = TorchPipelineRunner(
            entry.schedule,
            entry.M,
            rank,
            ctx.S,
            ctx.B,
            ctx.module,
            ctx.loss_fn,
            device,
            ctx.inputs,
            ctx.targets,
        )
        return lambda: IterStats(loss=tp.step(), compute_s=float("nan"), wait_s=float("nan"))
    ops = entry.ops[rank]
    up = entry.fwd[rank - 1] if rank > 0 else None
    down = entry.bwd[rank + 1] if rank < ctx.S - 1 else None
    return lambda: run_ops(ctx, ops, entry.mode, entry.fwd[rank], up, down)


def _optimizer(
    name: str, params: list[torch.nn.Parameter], lr: float
) -> torch.optim.Optimizer | None:
    key = name.lower()
    if key == "none" or not params:
        return None
    if key == "sgd":
        return torch.optim.SGD(params, lr=lr)
    if key == "adam":
        return torch.optim.Adam(params, lr=lr)
    if key == "adamw":
        return torch.optim.AdamW(params, lr=lr)
    raise PlanRefused(f"unknown optimizer {name!r}; valid: none, sgd, adam, adamw")


def run_worker(spec: RunSpec, rank: int, world: int) -> dict[str, Any] | None:
    """Run this rank's stage for every entry; rank 0 returns (and writes) the results."""
    if world != spec.S:
        raise PlanRefused(
            f"launched with WORLD_SIZE={world} but the problem has S={spec.S} stages "
            "(one process per stage)"
        )
    torch.set_num_threads(max(1, spec.threads))
    device = _device(spec.backend)
    if spec.backend == "nccl":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group(spec.backend, timeout=timedelta(seconds=spec.timeout_s))
    _trace(rank, "process group ready")
    _check_same_spec(spec, rank, world, device)
    from umpipe_bench.problems.models import get_model

    model = get_model(spec.model)
    dtype = parse_dtype(spec.dtype)
    module = build_stages(spec.model, spec.config, spec.layers_per_stage, dtype, spec.seed)[rank]
    module = module.to(device).train()
    inputs, targets = model.sample_batch(spec.B, spec.config, spec.seed, dtype)
    S = spec.S
    # one communicator per direction (every rank joins both, in the same order)
    timeout = timedelta(seconds=spec.timeout_s)
    act_group = dist.new_group(list(range(world)), timeout=timeout)
    grad_group = dist.new_group(list(range(world)), timeout=timeout)
    groups = {KIND_ACT: act_group, KIND_PROBE: act_group, KIND_GRAD: grad_group}
    ctx = StageContext(
        stage=rank,
        S=S,
        B=spec.B,
        module=module,
        loss_fn=model.loss,
        inputs=inputs.to(device) if rank == 0 else None,
        targets=targets.to(device) if rank == S - 1 else None,
        prev=Channel(rank, rank - 1, device, groups) if rank > 0 else None,
        next=Channel(rank, rank + 1, device, groups) if rank < S - 1 else None,
        prefetch=spec.prefetch and spec.backend == "gloo",
    )
    _probe(ctx, ctx.inputs[:1] if ctx.inputs is not None else None)
    _trace(rank, "stage built and shapes probed")
    ctx.before_op = _fault_hook(rank, ctx)
    runners = [_runner(e, ctx, rank, device) for e in spec.entries]
    params = [p for p in module.parameters() if p.requires_grad]
    opt = _optimizer(spec.optimizer, params, spec.lr)
    out_dir = Path(spec.out_dir)
    E, N = len(spec.entries), spec.iters
    record = torch.full((E, max(N, 1), 4), float("nan"), dtype=torch.float64)
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)
    # per-op timers of the measured iterations (executor.OpTime), kept when the caller asks
    # for them: UMPIPE_OP_TIMES=<folder> (scripts/measure_real.py --op-times)
    op_dir = os.environ.get("UMPIPE_OP_TIMES")
    op_times: list[list[list[Any]]] = [[] for _ in spec.entries]
    gc.collect()
    gc.freeze()  # long-lived objects out of the collector's way: collect() below stays cheap
    for it in range(spec.warmup + N):
        for k, run in enumerate(runners):
            gc.collect()
            dist.barrier()
            gc.disable()
            try:
                t0 = time.perf_counter()
                for p in params:
                    p.grad = None
                stats = run()
                if spec.dump_grads and it == spec.warmup:
                    _dump_grads(out_dir, k, rank, module, stats)
                t_opt = time.perf_counter()
                if opt is not None:
                    opt.step()
                sync()
                t1 = time.perf_counter()
            finally:
                gc.enable()
            if it >= spec.warmup:
                loss = stats.loss if stats.loss is not None else float("nan")
                if op_dir:
                    op_times[k].append([[o.kind, o.index, o.start_sample, o.stop_sample,
                                         o.start, o.end, o.wait, o.take, o.send]
                                        for o in stats.ops])
                record[k, it - spec.warmup] = torch.tensor(
                    [t1 - t0, stats.compute_s + (t1 - t_opt), stats.wait_s, loss],
                    dtype=torch.float64,
                )
    _trace(rank, "timing done")
    if op_dir:
        Path(op_dir).mkdir(parents=True, exist_ok=True)
        Path(op_dir, f"op-times-s{rank}.json").write_text(json.dumps(
            {"fields": ["kind", "index", "a", "b", "start", "end", "wait", "take", "send"],
             "entries": {e.label: op_times[k] for k, e in enumerate(spec.entries)}}) + "\n")
    gathered = [torch.zeros_like(record) for _ in range(world)]
    if spec.backend == "nccl":
        dev_record = record.to(device)
        dev_gathered = [torch.zeros_like(dev_record) for _ in range(world)]
        dist.all_gather(dev_gathered, dev_record)
        gathered = [g.cpu() for g in dev_gathered]
    else:
        dist.all_gather(gathered, record)
    result = None
    if rank == 0:
        result = _result(spec, world, gathered)
        tmp = out_dir / "result.json.tmp"
        tmp.write_text(json.dumps(result) + "\n", encoding="utf-8")
        os.replace(tmp, out_dir / "result.json")
    dist.barrier()
    _trace(rank, "results written")
    return result


def _dump_grads(
    out_dir: Path, k: int, rank: int, module: torch.nn.Module, stats: IterStats
) -> None:
    grads = {
        name: (p.grad.detach().cpu().clone() if p.grad is not None else None)
        for name, p in module.named_parameters()
    }
    torch.save({"grads": grads, "loss": stats.loss}, out_dir / f"grads-e{k}-s{rank}.pt")


def _result(spec: RunSpec, world: int, gathered: list[torch.Tensor]) -> dict[str, Any]:
    allr = torch.stack(gathered)  # [rank, entry, iter, 4]
    entries = []
    for k, e in enumerate(spec.entries):
        wall = allr[:, k, : spec.iters, 0]
        entries.append(
            {
                "label": e.label,
                "engine": e.engine,
                "schedule": e.schedule,
                "mode": e.mode,
                "times": wall.max(dim=0).values.tolist(),
                "stage_wall": wall.tolist(),
                "stage_compute": allr[:, k, : spec.iters, 1].tolist(),
                "stage_wait": allr[:, k, : spec.iters, 2].tolist(),
                "loss": allr[world - 1, k, : spec.iters, 3].tolist(),
            }
        )
    return {
        "run_id": spec.run_id,
        "problem": spec.problem,
        "world_size": world,
        "backend": spec.backend,
        "torch": torch.__version__,
        "threads": spec.threads,
        "host": socket.gethostname(),
        "iters": spec.iters,
        "warmup": spec.warmup,
        "entries": entries,
    }


def write_failure(out_dir: str | os.PathLike[str], rank: int, exc: BaseException) -> None:
    """Record why this stage failed, for the launcher (best effort, never raises)."""
    try:
        info = {
            "stage": rank,
            "type": type(exc).__name__,
            "message": str(exc),
            "secondary": isinstance(exc, PeerLostError),
            "peer": getattr(exc, "peer", None),
            "time": time.time(),
            "traceback": "".join(traceback.format_exception(exc)),
        }
        path = Path(out_dir) / f"error-stage{rank}.json"
        tmp = path.with_suffix(".tmp")
        tmp.write_text(json.dumps(info) + "\n", encoding="utf-8")
        os.replace(tmp, path)
    except Exception:  # reporting must not mask the original failure
        pass


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m umpipe_bench.runtime.worker",
        description="One pipeline stage of an umpipe-bench execute run (started by torchrun).",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    parser.add_argument("--spec", required=True, help="run spec JSON written by the launcher")
    args = parser.parse_args(argv)
    return run_rank_main(RunSpec.load(args.spec), run_worker, "stage")


def run_rank_main(spec: Any, run: Any, what: str) -> int:
    """Run ``run(spec, rank, world)`` for this torchrun rank; on any failure record it for the
    launcher (:func:`write_failure`), print it, and exit at once (a clean interpreter shutdown
    could block on the process group); on success leave the process group."""
    rank = int(os.environ.get("RANK", "0"))
    world = int(os.environ.get("WORLD_SIZE", "1"))
    try:
        run(spec, rank, world)
    except BaseException as exc:
        write_failure(spec.out_dir, rank, exc)
        print(f"[umpipe] {what} {rank} failed: {type(exc).__name__}: {exc}", file=sys.stderr)
        traceback.print_exc()
        sys.stderr.flush()
        sys.stdout.flush()
        os._exit(1)
    if dist.is_initialized():
        dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
