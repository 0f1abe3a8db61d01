#!/usr/bin/env python
"""Where the device simulator's prediction of torch's schedules misses: every action's time
inside torch.distributed.pipelining against the profile, and the cost of a message.

Three steps, each its own command (results/real/torch-schedule-ops.md is the third's output):

    python scripts/torch_schedule_ops.py run ENTRIES --rounds 12 --out DIR
    python scripts/torch_schedule_ops.py exchange --out DIR
    python scripts/torch_schedule_ops.py report --entries ENTRIES --ops DIR --runs RUN.json ...

``run``: two processes (gloo, one thread each, ``torch.multiprocessing.spawn``) hold every
entry of ``ENTRIES`` (a ``--predict`` or ``--union`` file of
``scripts/measure_torch_schedules.py``) and run it round by round in a rotating order, as that
script does; every ``PipelineStage.forward_one_chunk`` / ``backward_one_chunk`` /
``backward_weight_one_chunk`` call and every wait on a point-to-point batch is timed
(``time.perf_counter``), and each iteration's wall and CPU time. Two warm-up rounds are
dropped. Output: ``DIR/ops.r{rank}.json``.

``exchange``: the CPU a message costs on this machine: both processes run the same compute
(20 steps of ten 256x256 matrix products), once plain and once with one send and one receive
between the two after every step, interleaved over 30 rounds; the median difference over 20
is the cost of one exchange (a send and a receive on each side), per message size.
Output: ``DIR/exchange.json``.

``report``: per entry and device, the in-runtime median of each (kind, chunk) action against
the chunk's profiled cost (``umpipe_bench.layout.group_layers`` of the workload's
one-layer-per-stage profile), summed by kind; and a **replay**: the device simulator re-run
on each entry with its chunks' costs replaced by the in-runtime medians (``B`` without the far
factor), without and with a CPU charge per message on both ends of every cross-device
transfer, each ranked (Spearman) against the measured entry times of ``--runs`` (median over
launches of the per-launch medians). The replay is not a prediction (it reads the entry's own
run); it shows how much of the ranking error the action costs explain.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from umpipe_bench.runtime.allocator import (  # noqa: E402
    add_malloc_option,
    record_allocator,
    spawn_allocator,
)

_KIND = {"forward_one_chunk": "F", "backward_weight_one_chunk": "W"}
_ATTR = {"F": "fwd", "B": "bwd", "I": "ibwd", "W": "wbwd"}


def _label(e: dict[str, Any]) -> str:
    return f"{e['schedule']}:M{e['M']}:" + "-".join(map(str, e["partition"]))


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _init(rank: int, port: int) -> None:
    import torch
    import torch.distributed as dist

    from umpipe_bench.runtime.lifetime import die_with_parent

    die_with_parent()
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port), RANK=str(rank),
                      WORLD_SIZE="2")
    torch.set_num_threads(1)
    dist.init_process_group("gloo")


def _instrument(log: list[tuple[str, int, float, float]]) -> None:
    """Time torch's stage actions and point-to-point waits into ``log``."""
    import torch.distributed.pipelining.schedules as sc
    import torch.distributed.pipelining.stage as st

    for name in ("forward_one_chunk", "backward_one_chunk", "backward_weight_one_chunk"):
        f = getattr(st._PipelineStageBase, name)

        def timed(self: Any, *a: Any, _f: Any = f, _n: str = name, **k: Any) -> Any:
            t0 = time.perf_counter()
            out = _f(self, *a, **k)
            full = k.get("full_backward", a[2] if len(a) > 2 else True)
            kind = _KIND.get(_n, "B" if full else "I")
            log.append((kind, self.stage_index, t0, time.perf_counter()))
            return out

        setattr(st._PipelineStageBase, name, timed)
    wait = sc._wait_batch_p2p

    def timed_wait(work: Any) -> Any:
        t0 = time.perf_counter()
        out = wait(work)
        log.append(("wait", -1, t0, time.perf_counter()))
        return out

    sc._wait_batch_p2p = timed_wait


def _run_rank(rank: int, port: int, entries_file: str, rounds: int, out: str,
              runtime_gc: bool = False) -> None:
    """One rank of ``run``; ``runtime_gc``: collect garbage before each iteration and keep the
    collector off during it, as the timing runtime does (umpipe_bench/runtime/torch_multi.py)."""
    import gc

    import torch
    import torch.distributed as dist

    from umpipe_bench.problem import Problem
    from umpipe_bench.problems.models import get_model
    from umpipe_bench.runtime.torch_multi import TorchScheduleRunner
    from umpipe_bench.runtime.torch_schedules import make_entry

    _init(rank, port)
    spec = json.loads(Path(entries_file).read_text(encoding="utf-8"))
    prov = Problem.load(spec["workload"]).provenance
    model, cfg = get_model(prov["model"]), dict(prov["config"])
    layers = [m.train() for m in model.build(cfg, torch.float32, 0)]
    B = Problem.load(spec["workload"]).B
    x, y = model.sample_batch(B, cfg, 0, torch.float32)
    log: list[tuple[str, int, float, float]] = []
    _instrument(log)
    runners = {}
    for i, e in enumerate(spec["entries"]):
        te = make_entry(e, D=2, B=B, n_layers=len(layers), index=i)
        runners[_label(e)] = TorchScheduleRunner(te, rank, 2, B, layers, model.loss,
                                                 torch.device("cpu"), x, y)
    params = [p for m in layers for p in m.parameters()]
    opt = torch.optim.Adam(params)
    labels = list(runners)
    result: dict[str, list[dict[str, Any]]] = {k: [] for k in labels}
    if runtime_gc:
        gc.collect()
        gc.freeze()
    for rnd in range(rounds + 2):
        for j in range(len(labels)):
            k = labels[(rnd + j) % len(labels)]
            if runtime_gc:
                gc.collect()
            dist.barrier()
            if runtime_gc:
                gc.disable()
            log.clear()
            for p in params:
                p.grad = None
            t0, c0 = time.perf_counter(), time.process_time()
            runners[k].step()
            opt.step()
            t1, c1 = time.perf_counter(), time.process_time()
            if runtime_gc:
                gc.enable()
            if rnd >= 2:
                result[k].append({"wall": t1 - t0, "cpu": c1 - c0,
                                  "ops": [(n, s, a - t0, b - t0) for n, s, a, b in log]})
    Path(out, f"ops.r{rank}.json").write_text(json.dumps(result), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


def _exchange_rank(rank: int, port: int, sizes: list[int], out: str, malloc: str) -> None:
    import torch
    import torch.distributed as dist

    _init(rank, port)
    a, b = torch.randn(256, 256), torch.randn(256, 256)
    peer = 1 - rank
    rows = []
    for nbytes in sizes:
        send, recv = torch.randn(nbytes // 4), torch.empty(nbytes // 4)
        times: dict[str, list[float]] = {"plain": [], "msg": []}
        for r in range(30):
            for mode in (("plain", "msg") if r % 2 == 0 else ("msg", "plain")):
                dist.barrier()
                t0 = time.perf_counter()
                for _ in range(20):
                    for _ in range(10):
                        torch.mm(a, b)
                    if mode == "msg":
                        ops = [dist.P2POp(dist.isend, send, peer),
                               dist.P2POp(dist.irecv, recv, peer)]
                        for w in dist.batch_isend_irecv(ops):
                            w.wait()
                times[mode].append(time.perf_counter() - t0)
        plain, msg = statistics.median(times["plain"]), statistics.median(times["msg"])
        rows.append({"bytes": nbytes, "plain_s": plain, "with_messages_s": msg,
                     "per_exchange_s": (msg - plain) / 20, "malloc": malloc})
    if rank == 0:
        Path(out, "exchange.json").write_text(json.dumps(rows, indent=1), encoding="utf-8")
    dist.barrier()
    dist.destroy_process_group()


Key = tuple[str, int]


def _ops_of(run: list[dict[str, Any]]) -> tuple[dict[Key, float], dict[Key, int]]:
    """Median per action of each (kind, chunk) over the iterations, and its count."""
    acc: dict[Key, list[float]] = defaultdict(list)
    for it in run:
        per: dict[Key, float] = defaultdict(float)
        for kind, c, t0, t1 in it["ops"]:
            if kind != "wait":
                per[(kind, c)] += t1 - t0
        for key, v in per.items():
            acc[key].append(v)
    count: dict[Key, int] = defaultdict(int)
    for kind, c, _a, _b in run[0]["ops"]:
        if kind != "wait":
            count[(kind, c)] += 1
    return {k: statistics.median(v) / count[k] for k, v in acc.items()}, count


def _report(entries_file: str, ops_dir: str, runs: list[str], charges: list[float]) -> str:
    import numpy as np
    from scipy.stats import spearmanr

    from umpipe_bench.devsim import edp_sizes, simulate_devices
    from umpipe_bench.layout import chunk_devices, group_layers
    from umpipe_bench.problem import Problem
    from umpipe_bench.torch_schedules import schedule_info, torch_orders, torch_send_after

    spec = json.loads(Path(entries_file).read_text(encoding="utf-8"))
    P = Problem.load(spec["workload"])
    ranks = [json.loads(Path(ops_dir, f"ops.r{k}.json").read_text(encoding="utf-8"))
             for k in (0, 1)]
    measured = [json.loads(Path(f).read_text(encoding="utf-8"))["summary"]["rows"] for f in runs]
    lines = [f"## {P.name}", "",
             f"`python scripts/torch_schedule_ops.py report --entries {entries_file} --ops "
             f"{ops_dir} --runs {' '.join(runs)}`", "",
             "| entry | device | action: in-runtime / profiled ms per action |", "|---|---:|---|"]
    tot: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0])
    table: list[tuple[str, float, float, list[float]]] = []
    for e in spec["entries"]:
        lab = _label(e)
        if lab not in ranks[0]:
            continue
        G = group_layers(P, e["partition"])
        d = G.to_dict()
        si = list(P.sizes).index(P.B // e["M"])
        for k in (0, 1):
            med, cnt = _ops_of(ranks[k][lab])
            cells = []
            for (kind, c) in sorted(med):
                prof = getattr(G.stages[c], _ATTR[kind])[si]
                tot[kind][0] += med[(kind, c)] * cnt[(kind, c)]
                tot[kind][1] += prof * cnt[(kind, c)]
                cells.append(f"{kind}{c}x{cnt[(kind, c)]} "
                             f"{med[(kind, c)] * 1e3:.1f}/{prof * 1e3:.1f}")
                st = d["stages"][c]
                st[_ATTR[kind]] = list(st[_ATTR[kind]])
                st[_ATTR[kind]][si] = max(med[(kind, c)], 1e-7)
                if kind == "B":
                    st["bwd_far"] = 1.0
            lines.append(f"| {lab} | {k} | {' '.join(cells)} |")
        info = schedule_info(e["torch_class"])
        v = e["v"]
        vv = None if info.layout == "one" else v
        lists = torch_orders(info.name, 2, e["M"], vv)
        held = torch_send_after(info.name, 2, e["M"], vv)
        cd = chunk_devices(info.layout, 2, v)
        sizes = edp_sizes(P.B, e["M"])
        pred = simulate_devices(G, cd, lists, sizes, "stash", send_after=held).iteration_time
        G2 = Problem.from_dict(d)
        replay = [_replay(G2, cd, lists, sizes, h, held) for h in charges]
        meas = float(np.median([{r["label"]: r["median"] for r in rows}[lab] for rows in measured]))
        table.append((lab, meas, pred, replay))
    lines += ["", "In-runtime over profiled, all actions of a kind: " + ", ".join(
        f"{k} {a / b:.2f}" for k, (a, b) in sorted(tot.items())), "",
        "| entry | measured (ms) | predicted (ms) | " + " | ".join(
            f"replay, {h * 1e3:.1f} ms per message (ms)" for h in charges) + " |",
        "|---|---:|---:|" + "---:|" * len(charges)]
    for lab, meas, pred, replay in sorted(table, key=lambda t: t[1]):
        lines.append(f"| {lab} | {meas * 1e3:.1f} | {pred * 1e3:.1f} | "
                     + " | ".join(f"{x * 1e3:.1f}" for x in replay) + " |")
    ms = [t[1] for t in table]
    rho = [spearmanr([t[2] for t in table], ms)[0]] + [
        spearmanr([t[3][i] for t in table], ms)[0] for i in range(len(charges))]
    lines += ["", "Spearman against measured: predicted " + f"{rho[0]:.3f}; " + "; ".join(
        f"replay at {h * 1e3:.1f} ms per message {r:.3f}" for h, r in zip(charges, rho[1:])), ""]
    return "\n".join(lines)


def _replay(problem: Any, cd: Any, lists: Any, sizes: Any, charge: float,
            send_after: Any = None) -> float:
    """The simulator's T with ``charge`` seconds of device time added to an action for each
    cross-device message it sends or receives (outputs leaving where ``send_after`` says).
    An action's message count depends only on its kind and chunk (the chunk's device is
    fixed), so the charge is folded into that chunk's cost of that kind at every size."""
    from umpipe_bench.devsim import simulate_devices
    from umpipe_bench.problem import Problem

    d = problem.to_dict()
    C = problem.S
    for c in range(C):
        up = c > 0 and cd[c - 1] != cd[c]  # its input arrives, its input gradient leaves
        down = c < C - 1 and cd[c + 1] != cd[c]  # its output leaves, its output gradient arrives
        st = d["stages"][c]
        for attr in ("fwd", "bwd", "ibwd"):
            if st.get(attr) is not None:
                st[attr] = [x + (up + down) * charge for x in st[attr]]
    return simulate_devices(Problem.from_dict(d), cd, lists, sizes, "stash",
                            send_after=send_after).iteration_time


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    sub = ap.add_subparsers(dest="cmd", required=True)
    r = sub.add_parser("run", help="time every action of every entry inside torch's runtime")
    r.add_argument("entries")
    r.add_argument("--rounds", type=int, default=12)
    r.add_argument("--out", required=True)
    x = sub.add_parser("exchange", help="the CPU cost of one message exchange, per size")
    x.add_argument("--sizes", default="4096,131072,524288,1310720,5242880",
                   help="message sizes in bytes, comma-separated")
    x.add_argument("--out", required=True)
    add_malloc_option(r)
    add_malloc_option(x)
    p = sub.add_parser("report", help="in-runtime against profiled action costs, and the replay")
    p.add_argument("--entries", required=True)
    p.add_argument("--ops", required=True, help="the folder of `run`")
    p.add_argument("--runs", nargs="+", required=True,
                   help="measure_torch_schedules.py outputs of the same entries")
    p.add_argument("--charges", default="0,0.0005,0.001",
                   help="CPU seconds per message for the replay, comma-separated")
    a = ap.parse_args(argv)
    import torch.multiprocessing as mp

    if a.cmd == "run":
        if a.rounds < 1:
            ap.error("--rounds must be >= 1")
        Path(a.out).mkdir(parents=True, exist_ok=True)
        with spawn_allocator(a.malloc) as mode:
            mp.spawn(_run_rank, args=(_free_port(), a.entries, a.rounds, a.out), nprocs=2)
        record_allocator(a.out, mode)
    elif a.cmd == "exchange":
        Path(a.out).mkdir(parents=True, exist_ok=True)
        sizes = [int(s) for s in a.sizes.split(",")]
        with spawn_allocator(a.malloc) as mode:
            mp.spawn(_exchange_rank, args=(_free_port(), sizes, a.out, mode), nprocs=2)
        for row in json.loads(Path(a.out, "exchange.json").read_text(encoding="utf-8")):
            print(f"{row['bytes']:>9} B: {row['per_exchange_s'] * 1e3:.3f} ms per exchange")
    else:
        print(_report(a.entries, a.ops, a.runs, [float(c) for c in a.charges.split(",")]))
    return 0


if __name__ == "__main__":
    sys.exit(main())
