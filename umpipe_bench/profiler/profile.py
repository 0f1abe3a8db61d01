"""``profile_model``: measure a registered torch model stage by stage into a :class:`Problem`.

The façade over the engine (:mod:`.engine`), the link calibration (:mod:`.link`) and the
grouping algorithms (:mod:`.partition`). What ends up in the problem (MODEL.md §1):

* ``sizes``: 1, 2, 4, ... below B, plus B; ``stages[s].fwd/bwd/rbwd``: medians per size;
  ``stages[s].opt``: median optimizer step; ``stages[s].extra``: the layer range and the noise
  figure (max/min over the repeats) of every cell;
* ``stages[s].memory``: parameter + gradient + optimizer-state bytes, saved-activation bytes per
  sample (without the stage input) and stage-input bytes per sample;
* ``links[s]``: activation and gradient bytes per sample across boundary ``s -> s+1`` (measured
  tensors) and the calibrated (or given) latency and bandwidth, the same for every boundary;
* ``provenance``: model, config, layers_per_stage (the runtime rebuilds stages from these three),
  device, torch version, threads, date, repeats, and how each figure was measured.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..problem import Link, Problem, ProblemError, StageCosts, StageMemory
from .corunner import co_runner
from .engine import Measurements, make_clock, measure_cells, measure_memory, prepare_rigs
from .link import LinkCalibration, calibrate_link
from .linkfit import message_grid
from .partition import balanced_partition, check_layers_per_stage, one_per_stage, size_grid

__all__ = ["Grouping", "LinkFigures", "layer_costs_from_problem", "profile_model"]

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Grouping:
    """How layers become stages: exactly one of ``layers_per_stage`` (explicit), ``stages``
    (balanced by measured time, MODEL.md §1) or neither (one layer per stage). For balancing,
    ``balance_from`` names a one-layer-per-stage problem file of the same model, config and B
    whose ``fwd(B) + bwd(B)`` gives the layer times; without it the profiler first runs a
    short per-layer probe (fwd + bwd at size B)."""

    layers_per_stage: tuple[int, ...] | None = None
    stages: int | None = None
    balance_from: str | None = None


@dataclass(frozen=True)
class LinkFigures:
    """Given link figures (skip calibration): latency in seconds, bandwidth in bytes/s."""

    latency: float
    bandwidth: float


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def _host(device: str) -> dict[str, Any]:
    host: dict[str, Any] = {"cpu": _cpu_name(), "python": platform.python_version()}
    if device.startswith("cuda"):
        host["gpu"] = torch.cuda.get_device_name(torch.device(device))
        host["cuda"] = torch.version.cuda
    return host


def layer_costs_from_problem(
    path: str, model: str, config: Mapping[str, Any], B: int, n_layers: int
) -> list[float]:
    """Per-layer times ``fwd(B) + bwd(B)`` from a one-layer-per-stage problem file, after
    checking it profiles the same model, config and B (errors name the mismatching field)."""
    p = Problem.load(path)
    prov = p.provenance
    where = f"--balance-from {path!r}"
    if prov.get("model") != model:
        raise ProblemError(f"{where}: provenance 'model' is {prov.get('model')!r}, not {model!r}")
    if dict(prov.get("config", {})) != dict(config):
        raise ProblemError(
            f"{where}: provenance 'config' {prov.get('config')!r} differs from {dict(config)!r}"
        )
    if p.B != B:
        raise ProblemError(f"{where}: field 'B' is {p.B}, not {B}")
    if list(prov.get("layers_per_stage", [])) != [1] * n_layers:
        raise ProblemError(
            f"{where}: provenance 'layers_per_stage' must be one layer per stage "
            f"({n_layers} stages), got {prov.get('layers_per_stage')!r}"
        )
    return [p.fwd(s, B) + p.bwd(s, B) for s in range(p.S)]


def profile_model(
    model: str,
    *,
    B: int,
    grouping: Grouping = Grouping(),
    config: Mapping[str, Any] | None = None,
    device: str = "cpu",
    threads: int | None = 1,
    repeats: int = 5,
    warmup: int = 1,
    optimizer: str = "adam",
    dtype: str = "float32",
    seed: int = 0,
    clock: str = "wall",
    link: LinkFigures | None = None,
    link_backend: str = "gloo",
    name: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
    co_run: bool = False,
) -> Problem:
    """Profile ``model`` (a name from :func:`problems.models.get_model`) at mini-batch ``B``.

    Runs, in order: the grouping (maybe a per-layer probe), the timed rounds over all cells
    (see :mod:`.engine` for the interleaved order), the memory pass, and the link calibration
    unless ``link`` gives the figures. Returns a validated :class:`Problem`; ``save`` it.
    ``clock="thread-cpu"`` (CPU, one thread) times CPU seconds instead of wall seconds: a
    diagnostic for shared machines, not what a committed profile should hold.
    ``co_run=True`` times the rounds while a co-runner process trains the same model on
    another core (:mod:`.corunner`): the load a CPU pipeline's neighbouring stage puts on the
    shared memory system.
    """
    from problems.models import get_model

    started = time.perf_counter()
    say = log or (lambda _msg: None)
    if dtype not in _DTYPES:
        raise ValueError(f"unknown dtype {dtype!r}; valid dtypes: {', '.join(_DTYPES)}")
    if repeats < 1:
        raise ValueError(f"repeats must be >= 1, got {repeats}")
    if grouping.layers_per_stage is not None and grouping.stages is not None:
        raise ValueError("give layers_per_stage or stages (balanced), not both")
    if grouping.balance_from and grouping.stages is None:
        raise ValueError("balance_from needs stages (the number of balanced stages)")
    if link is not None and not (
        math.isfinite(link.latency) and link.latency >= 0 and link.bandwidth > 0
    ):
        raise ValueError(
            f"link figures: latency must be >= 0 s and bandwidth > 0 B/s, got {link.latency!r}, "
            f"{link.bandwidth!r}"
        )
    dev = torch.device(device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        raise ValueError("device 'cuda' requested but torch.cuda.is_available() is False")
    previous_threads = torch.get_num_threads()
    try:
        if threads is not None:
            if threads < 1:
                raise ValueError(f"threads must be >= 1, got {threads}")
            torch.set_num_threads(threads)
        spec = get_model(model)
        sizes = size_grid(B)
        tdtype = _DTYPES[dtype]
        layers = [layer.to(dev) for layer in spec.build(dict(config or {}), tdtype, seed)]
        full_config = _resolved_config(spec, config)
        inputs, targets = spec.sample_batch(B, dict(config or {}), seed, tdtype)
        inputs, targets = inputs.to(dev), targets.to(dev)
        timer = make_clock(dev, clock)
        n_layers = len(layers)

        # ---- 1. layers -> stages
        balance_note = None
        if grouping.layers_per_stage is not None:
            lps = check_layers_per_stage(grouping.layers_per_stage, n_layers)
            how_grouped = "explicit"
        elif grouping.stages is not None:
            S = grouping.stages
            if grouping.balance_from:
                costs = layer_costs_from_problem(
                    grouping.balance_from, model, full_config, B, n_layers
                )
                balance_note = (
                    f"layer times fwd(B)+bwd(B) read from {Path(grouping.balance_from).name}"
                )
            else:
                say(f"probing {n_layers} layers at size {B} to balance {S} stages")
                probe_rigs = prepare_rigs(
                    layers, one_per_stage(n_layers), inputs, targets, optimizer=optimizer, seed=seed
                )
                probe = measure_cells(
                    probe_rigs,
                    (B,),
                    spec.loss,
                    timer,
                    repeats=3,
                    warmup=1,
                    recompute=False,
                    opt=False,
                )
                costs = [probe.fwd[s][0].median + probe.bwd[s][0].median for s in range(n_layers)]
                balance_note = "layer times fwd(B)+bwd(B) from a probe: median of 3 after 1 warm-up"
                del probe_rigs
                for layer in layers:
                    layer.zero_grad(set_to_none=True)
            lps = balanced_partition(costs, S)
            how_grouped = "balanced: exact linear-partition DP minimizing the slowest stage"
        else:
            lps = one_per_stage(n_layers)
            how_grouped = "one layer per stage"
        say(f"layers per stage: {','.join(map(str, lps))} ({how_grouped})")

        # ---- 2. link first (seconds; fails fast): one sample of the smallest boundary up to B
        # samples of the largest, measured on the stage inputs a no-grad forward produced
        rigs = prepare_rigs(layers, lps, inputs, targets, optimizer=optimizer, seed=seed)
        if link is None and len(rigs) > 1:
            per_sample = [rig.inputs[:1].numel() * rig.inputs.element_size() for rig in rigs[1:]]
            messages = message_grid(min(per_sample), max(per_sample) * B)
            say(f"calibrating the link: ping-pong of {len(messages)} sizes between two processes")
            cal = calibrate_link(threads=threads or 1, backend=link_backend, message_bytes=messages)
        elif link is None:
            cal = LinkCalibration(0.0, 1.0, method="single stage: no link")
        else:
            cal = LinkCalibration(link.latency, link.bandwidth, method="given on the command line")

        # ---- 3. timed rounds
        n_cells = len(rigs) * (len(sizes) + 1)
        bar = _progress_bar(n_cells * (warmup + repeats), model, progress)
        co_m = max(1, B // 4)
        if co_run:
            say(f"co-runner: training {model} at size {co_m} in another process meanwhile")
        try:
            with co_runner(model, full_config, dtype, seed, co_m, enabled=co_run):
                meas = measure_cells(
                    rigs,
                    sizes,
                    spec.loss,
                    timer,
                    repeats=repeats,
                    warmup=warmup,
                    progress=bar.update if bar is not None else None,
                )
        finally:
            if bar is not None:
                bar.close()

        # ---- 4. memory and boundary bytes
        mem = [measure_memory(rig, B, spec.loss) for rig in rigs]

        elapsed = time.perf_counter() - started
        return _assemble(
            name or f"{model}-s{len(lps)}",
            model=model,
            config=full_config,
            B=B,
            lps=lps,
            meas=meas,
            mem=mem,
            cal=cal,
            rigs_layers=[rig.layers for rig in rigs],
            layer_names=[type(layer).__name__ for layer in layers],
            settings={
                "device": str(dev),
                "threads": torch.get_num_threads(),
                "repeats": repeats,
                "warmup": warmup,
                "optimizer": optimizer,
                "dtype": dtype,
                "seed": seed,
                "clock": clock,
                "co_runner": (
                    f"{model} fwd+bwd at size {co_m}, 1 thread, in another process"
                    if co_run else None
                ),
                "grouping": how_grouped,
                "balance": balance_note,
                "profile_seconds": round(elapsed, 1),
            },
        )
    finally:
        torch.set_num_threads(previous_threads)  # a library call leaves no trace


def _resolved_config(spec: Any, config: Mapping[str, Any] | None) -> dict[str, Any]:
    merged = dict(spec.default_config)
    merged.update(dict(config or {}))
    return merged


def _progress_bar(total: int, model: str, enabled: bool) -> Any:
    if not enabled:
        return None
    from tqdm import tqdm

    return tqdm(total=total, desc=f"profile {model}", unit="cell", mininterval=1.0)


def _assemble(
    name: str,
    *,
    model: str,
    config: dict[str, Any],
    B: int,
    lps: Sequence[int],
    meas: Measurements,
    mem: Sequence[Any],
    cal: LinkCalibration,
    rigs_layers: Sequence[tuple[int, int]],
    layer_names: Sequence[str],
    settings: dict[str, Any],
) -> Problem:
    stages = []
    for s, (a, b) in enumerate(rigs_layers):
        names = layer_names[a:b]
        label = names[0] if len(names) == 1 else f"{names[0]}..{names[-1]}"
        stages.append(
            StageCosts(
                fwd=tuple(c.median for c in meas.fwd[s]),
                bwd=tuple(c.median for c in meas.bwd[s]),
                rbwd=tuple(c.median for c in meas.rbwd[s]),
                opt=meas.opt[s].median,
                memory=StageMemory(
                    param_bytes=float(mem[s].param_bytes),
                    saved_act_bytes_per_sample=float(mem[s].saved_act_bytes_per_sample),
                    input_bytes_per_sample=float(mem[s].input_bytes_per_sample),
                ),
                name=f"L{a}-{b - 1} {label}" if b - a > 1 else f"L{a} {label}",
                extra={
                    "layers": [a, b],
                    "noise": {
                        "fwd": [_r(c.noise) for c in meas.fwd[s]],
                        "bwd": [_r(c.noise) for c in meas.bwd[s]],
                        "rbwd": [_r(c.noise) for c in meas.rbwd[s]],
                        "opt": _r(meas.opt[s].noise),
                    },
                    "weights_bytes": mem[s].weights_bytes,
                    "grad_bytes": mem[s].grad_bytes,
                    "optimizer_state_bytes": mem[s].optimizer_state_bytes,
                },
            )
        )
    links = [
        Link(
            act_bytes=float(mem[s].output_bytes_per_sample),
            grad_bytes=float(mem[s + 1].input_grad_bytes_per_sample),
            latency=cal.latency,
            bandwidth=cal.bandwidth,
        )
        for s in range(len(stages) - 1)
    ]
    noise_all = [
        c.noise
        for table in (meas.fwd, meas.bwd, meas.rbwd)
        for row in table
        for c in row
        if math.isfinite(c.noise)
    ]
    repeats, warmup = settings["repeats"], settings["warmup"]
    provenance = {
        "source": "profiled",
        "model": model,
        "config": config,
        "layers_per_stage": list(lps),
        "device": settings["device"],
        "torch": torch.__version__,
        "threads": settings["threads"],
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "host": _host(settings["device"]),
        "repeats": repeats,
        "warmup_rounds": warmup,
        "seed": settings["seed"],
        "clock": settings["clock"],
        "co_runner": settings["co_runner"],
        "dtype": settings["dtype"],
        "optimizer": settings["optimizer"],
        "grouping": settings["grouping"],
        "balance": settings["balance"],
        "profile_seconds": settings["profile_seconds"],
        "noise_max": _r(max(noise_all)) if noise_all else None,
        "noise_median": _r(sorted(noise_all)[len(noise_all) // 2]) if noise_all else None,
        "how": {
            "order": f"{warmup} warm-up round(s) discarded, then {repeats} rounds; each round "
            "visits every (stage, size) cell and each stage's optimizer cell once, starting at "
            "a rotating offset; stash and recompute passes swap order every round",
            "fwd": "median over rounds of the stage forward with autograd recording "
            "(last stage: + loss / B)",
            "bwd": "median of the backward that directly follows that forward (activations "
            "kept), from the output gradient to the stage input",
            "rbwd": "median of one interval: forward again with autograd + backward "
            "(measured as its own pass, not fwd + bwd added)",
            "opt": f"median of one {settings['optimizer']} step over the stage parameters "
            "(gradients present)",
            "noise": "stages[s].extra.noise: max/min over the rounds, per cell",
            "clock": "CUDA events + synchronize"
            if settings["device"].startswith("cuda")
            else "time.thread_time: CPU seconds of the one compute thread (not wall time)"
            if settings["clock"] == "thread-cpu"
            else "time.perf_counter wall time (synchronous CPU ops)",
            "memory": "param_bytes = parameters + gradients + optimizer state; saved activations "
            "= storages autograd saves for backward (saved_tensors_hooks), without parameters "
            "and the stage input, at size B divided by B; input bytes = stage input / sample",
            "links": "act_bytes = stage output bytes per sample; grad_bytes = the next stage's "
            "input-gradient bytes per sample; latency/bandwidth: see link",
        },
        "link": cal.to_provenance(),
    }
    return Problem(
        name=name,
        B=B,
        sizes=meas.sizes,
        stages=tuple(stages),
        links=tuple(links),
        provenance=provenance,
        description=f"{model} profiled on {settings['device']}, B={B}, "
        f"{len(stages)} stages ({','.join(map(str, lps))} layers), "
        f"{settings['threads']} thread(s)",
    ).validate()


def _r(x: float) -> float | None:
    """Round a noise figure for the file (None for not-measured)."""
    return round(float(x), 3) if math.isfinite(x) else None
