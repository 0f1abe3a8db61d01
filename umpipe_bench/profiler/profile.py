"""``profile_model``: measure a registered torch model stage by stage into a :class:`Problem`.

The façade over the engine (:mod:`.engine`), the link calibration (:mod:`.link`) and the
grouping algorithms (:mod:`.partition`), in the named steps of :class:`Profiler`; the problem
itself is put together by :mod:`.assemble`. What ends up in the problem (docs/MODEL.md §1):

* ``sizes``: 1, 2, 4, ... below B, plus B; ``stages[s].fwd/bwd/rbwd``: medians per size;
  ``stages[s].opt``: median optimizer step; ``stages[s].extra``: the layer range and the noise
  figure (max/min over the repeats) of every cell;
* ``stages[s].memory``: parameter + gradient + optimizer-state bytes, saved-activation bytes per
  sample (without the stage input) and stage-input bytes per sample;
* ``links[s]``: activation and gradient bytes per sample across boundary ``s -> s+1`` (measured
  tensors) and the calibrated (or given) latency and bandwidth, the same for every boundary;
* ``provenance``: model, config, layers_per_stage (the runtime rebuilds stages from these three),
  device, torch version, threads, date, repeats, and how each figure was measured;
* with ``split_backward=True``: ``stages[s].ibwd/ribwd/wbwd`` and
  ``stages[s].memory.w_held_bytes_per_sample`` (docs/MODEL.md §1c, :mod:`.split`).

:func:`split_backward_into` adds the split-backward tables to an existing profiled problem
file, leaving every other number of the file as it was.
"""

from __future__ import annotations

import datetime as _dt
import math
import os
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import torch

from ..errors import ProfileError
from ..problem import Problem, ProblemError
from .assemble import HOW_SPLIT, ProfileSettings, assemble, split_fields
from .corunner import co_runner
from .engine import Measurements, make_clock, measure_cells, measure_memory, prepare_rigs
from .link import LinkCalibration, calibrate_link
from .linkfit import message_grid
from .locality import reference_sizes
from .partition import balanced_partition, check_layers_per_stage, one_per_stage, size_grid
from .split import measure_split_memory

__all__ = [
    "Grouping",
    "LinkFigures",
    "Profiler",
    "layer_costs_from_problem",
    "profile_model",
    "split_backward_into",
]

_DTYPES = {"float32": torch.float32, "float64": torch.float64, "bfloat16": torch.bfloat16}


@dataclass(frozen=True)
class Grouping:
    """How layers become stages: exactly one of ``layers_per_stage`` (explicit), ``stages``
    (balanced by measured time, docs/MODEL.md §1) or neither (one layer per stage). For balancing,
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
    locality: bool = True,
    split_backward: bool = False,
) -> Problem:
    """Profile ``model`` (a name from :func:`umpipe_bench.problems.models.get_model`) at mini-batch
    ``B``.

    Runs, in order, the steps of a :class:`Profiler`: the grouping (maybe a per-layer probe),
    the link calibration unless ``link`` gives the figures, the timed rounds over all cells
    (see :mod:`.engine` for the interleaved order) and the memory pass. Returns a validated
    :class:`Problem`; ``save`` it.
    ``clock="thread-cpu"`` (CPU, one thread) times CPU seconds instead of wall seconds: a
    diagnostic for shared machines, not what a committed profile should hold.
    ``co_run=True`` times the rounds while a co-runner process trains the same model on
    another core (:mod:`.corunner`): the load a CPU pipeline's neighbouring stage puts on the
    shared memory system.
    ``locality=True`` also measures each stage's backward locality factor ``bwd_far``
    (docs/MODEL.md §1b, :mod:`.locality`) inside the same rounds; False leaves it absent.
    ``split_backward=True`` also measures the split backward (I, forward + I, W) in the same
    rounds and the bytes held between I and W (docs/MODEL.md §1c, :mod:`.split`).
    """
    profiler = Profiler(model, B=B, grouping=grouping, config=config, device=device,
                        threads=threads, repeats=repeats, warmup=warmup, optimizer=optimizer,
                        dtype=dtype, seed=seed, clock=clock, link=link,
                        link_backend=link_backend, progress=progress, log=log, co_run=co_run,
                        locality=locality, split_backward=split_backward)
    return profiler.run(name)


class Profiler:
    """One profile as named steps: :meth:`group`, :meth:`calibrate`,
    :meth:`time_rounds`, :meth:`measure_memory`, then :func:`.assemble.assemble`.

    Arguments are checked when it is built (habit 11), before any model is loaded.
    """

    def __init__(self, model: str, *, B: int, grouping: Grouping, config: Mapping[str, Any] | None,
                 device: str, threads: int | None, repeats: int, warmup: int, optimizer: str,
                 dtype: str, seed: int, clock: str, link: LinkFigures | None,
                 link_backend: str, progress: bool, log: Callable[[str], None] | None,
                 co_run: bool, locality: bool = True, split_backward: bool = False) -> None:
        self.model, self.B, self.grouping = model, B, grouping
        self.config = dict(config or {})
        self.threads, self.repeats, self.warmup = threads, repeats, warmup
        self.optimizer, self.dtype, self.seed, self.clock = optimizer, dtype, seed, clock
        self.link, self.link_backend = link, link_backend
        self.progress, self.co_run = progress, co_run
        self.split = split_backward
        # one microbatch has no far order: nothing to measure at B = 1
        self.locality = reference_sizes(B) if locality and B > 1 else None
        self.say = log or (lambda _msg: None)
        self._check(device)
        self.dev = torch.device(device)

    def _check(self, device: str) -> None:
        g, link = self.grouping, self.link
        if self.dtype not in _DTYPES:
            raise ProfileError(f"unknown dtype {self.dtype!r}; valid dtypes: {', '.join(_DTYPES)}")
        if self.repeats < 1:
            raise ProfileError(f"repeats must be >= 1, got {self.repeats}")
        if self.threads is not None and self.threads < 1:
            raise ProfileError(f"threads must be >= 1, got {self.threads}")
        if g.layers_per_stage is not None and g.stages is not None:
            raise ProfileError("give layers_per_stage or stages (balanced), not both")
        if g.balance_from and g.stages is None:
            raise ProfileError("balance_from needs stages (the number of balanced stages)")
        if link is not None and not (
            math.isfinite(link.latency) and link.latency >= 0 and link.bandwidth > 0
        ):
            raise ProfileError(
                f"link figures: latency must be >= 0 s and bandwidth > 0 B/s, got "
                f"{link.latency!r}, {link.bandwidth!r}"
            )
        if torch.device(device).type == "cuda" and not torch.cuda.is_available():
            raise ProfileError("device 'cuda' requested but torch.cuda.is_available() is False")

    # ------------------------------------------------------------------ steps
    def load(self) -> None:
        """Build the model's layers and one seeded batch on the device."""
        from umpipe_bench.problems.models import get_model

        self.spec = get_model(self.model)
        tdtype = _DTYPES[self.dtype]
        self.layers = [layer.to(self.dev)
                       for layer in self.spec.build(dict(self.config), tdtype, self.seed)]
        self.full_config = _resolved_config(self.spec, self.config)
        inputs, targets = self.spec.sample_batch(self.B, dict(self.config), self.seed, tdtype)
        self.inputs, self.targets = inputs.to(self.dev), targets.to(self.dev)
        self.timer = make_clock(self.dev, self.clock)

    def group(self) -> tuple[list[int], str, str | None]:
        """Layers -> stages: ``(layers_per_stage, how grouped, balance note)``."""
        g, n_layers = self.grouping, len(self.layers)
        if g.layers_per_stage is not None:
            return list(check_layers_per_stage(g.layers_per_stage, n_layers)), "explicit", None
        if g.stages is None:
            return list(one_per_stage(n_layers)), "one layer per stage", None
        if g.balance_from:
            costs = layer_costs_from_problem(g.balance_from, self.model, self.full_config,
                                             self.B, n_layers)
            note = f"layer times fwd(B)+bwd(B) read from {Path(g.balance_from).name}"
        else:
            costs = self._probe_layers()
            note = "layer times fwd(B)+bwd(B) from a probe: median of 3 after 1 warm-up"
        lps = list(balanced_partition(costs, g.stages))
        return lps, "balanced: exact linear-partition DP minimizing the slowest stage", note

    def _probe_layers(self) -> list[float]:
        """A short per-layer probe (fwd + bwd at size B) to balance stages by time."""
        n_layers, B = len(self.layers), self.B
        self.say(f"probing {n_layers} layers at size {B} to balance {self.grouping.stages} "
                 "stages")
        rigs = prepare_rigs(self.layers, one_per_stage(n_layers), self.inputs, self.targets,
                            optimizer=self.optimizer, seed=self.seed)
        probe = measure_cells(rigs, (B,), self.spec.loss, self.timer, repeats=3, warmup=1,
                              recompute=False, opt=False)
        costs = [probe.fwd[s][0].median + probe.bwd[s][0].median for s in range(n_layers)]
        del rigs
        for layer in self.layers:
            layer.zero_grad(set_to_none=True)
        return costs

    def calibrate(self, rigs: Sequence[Any]) -> LinkCalibration:
        """The link first (seconds; fails fast): one sample of the smallest boundary up to B
        samples of the largest, on the stage inputs a no-grad forward produced."""
        if self.link is not None:
            return LinkCalibration(self.link.latency, self.link.bandwidth,
                                   method="given on the command line")
        if len(rigs) <= 1:
            return LinkCalibration(0.0, 1.0, method="single stage: no link")
        per_sample = [rig.inputs[:1].numel() * rig.inputs.element_size() for rig in rigs[1:]]
        messages = message_grid(min(per_sample), max(per_sample) * self.B)
        self.say(f"calibrating the link: ping-pong of {len(messages)} sizes between two "
                 "processes")
        return calibrate_link(threads=self.threads or 1, backend=self.link_backend,
                              message_bytes=messages)

    def time_rounds(self, rigs: Sequence[Any]) -> Measurements:
        """The timed rounds over every (stage, size) cell, maybe beside a co-runner."""
        sizes = size_grid(self.B)
        per_stage = len(sizes) + 1 + (self.locality is not None)
        bar = _progress_bar(len(rigs) * per_stage * (self.warmup + self.repeats),
                            self.model, self.progress)
        if self.co_run:
            self.say(f"co-runner: training {self.model} at size {self._co_m} in another "
                     "process meanwhile")
        try:
            with co_runner(self.model, self.full_config, self.dtype, self.seed, self._co_m,
                           enabled=self.co_run):
                return measure_cells(rigs, sizes, self.spec.loss, self.timer,
                                     repeats=self.repeats, warmup=self.warmup,
                                     locality=self.locality, split=self.split,
                                     progress=bar.update if bar is not None else None)
        finally:
            if bar is not None:
                bar.close()

    def measure_memory(self, rigs: Sequence[Any]) -> list[Any]:
        """Memory figures and boundary bytes of every stage at size B."""
        return [measure_memory(rig, self.B, self.spec.loss) for rig in rigs]

    def measure_split_memory(self, rigs: Sequence[Any]) -> list[Any] | None:
        """Bytes held between I and W of every stage at size B (None: split not measured)."""
        if not self.split:
            return None
        return [measure_split_memory(rig, self.B, self.spec.loss) for rig in rigs]

    @property
    def _co_m(self) -> int:
        return max(1, self.B // 4)

    def run(self, name: str | None = None) -> Problem:
        """Every step in order; torch's thread count is restored afterwards."""
        started = time.perf_counter()
        previous_threads = torch.get_num_threads()
        try:
            if self.threads is not None:
                torch.set_num_threads(self.threads)
            self.load()
            lps, how_grouped, balance_note = self.group()
            self.say(f"layers per stage: {','.join(map(str, lps))} ({how_grouped})")
            rigs = prepare_rigs(self.layers, lps, self.inputs, self.targets,
                                optimizer=self.optimizer, seed=self.seed)
            cal = self.calibrate(rigs)
            meas = self.time_rounds(rigs)
            mem = self.measure_memory(rigs)
            split_mem = self.measure_split_memory(rigs)
            settings = ProfileSettings(
                device=str(self.dev), threads=torch.get_num_threads(), repeats=self.repeats,
                warmup=self.warmup, optimizer=self.optimizer, dtype=self.dtype, seed=self.seed,
                clock=self.clock,
                co_runner=(f"{self.model} fwd+bwd at size {self._co_m}, 1 thread, in another "
                           "process" if self.co_run else None),
                grouping=how_grouped, balance=balance_note,
                profile_seconds=round(time.perf_counter() - started, 1),
            )
            return assemble(name or f"{self.model}-s{len(lps)}", model=self.model,
                            config=self.full_config, B=self.B, lps=lps, meas=meas, mem=mem,
                            cal=cal, rigs_layers=[rig.layers for rig in rigs],
                            layer_names=[type(layer).__name__ for layer in self.layers],
                            settings=settings, split_mem=split_mem)
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


def _loadavg() -> list[float] | None:
    try:
        return [round(x, 2) for x in os.getloadavg()]
    except OSError:  # pragma: no cover - platforms without it
        return None


def split_backward_into(
    path: str | os.PathLike[str],
    *,
    repeats: int = 5,
    warmup: int = 1,
    threads: int | None = None,
    device: str | None = None,
    progress: bool = True,
    log: Callable[[str], None] | None = None,
) -> Problem:
    """Measure the split backward of the profiled problem file ``path`` and return the problem
    with ``ibwd``, ``ribwd``, ``wbwd`` and ``memory.w_held_bytes_per_sample`` added; every
    other number is kept as it is (save it to update the file).

    Model, config, grouping, B, dtype, seed, optimizer, device and threads come from the file's
    provenance (``threads``/``device`` may be overridden). One run times, in interleaved
    rounds (:func:`.engine.measure_cells`), the stash pass (fwd, bwd), the split stash pass
    (fwd, I, W) and the split recompute pass (fwd + I, W) of every (stage, size) cell;
    ``provenance.split_backward`` records the run: date, rounds, threads, load averages at its
    start and end, and its own fwd and bwd medians, so a reader can compare them with the
    file's (drift between the two runs). Raises :class:`ProblemError` or
    :class:`ProfileError` with one line when the file is not a profiled problem.
    """
    problem = Problem.load(path)
    where = f"--split-backward-into {str(path)!r}"
    prov = dict(problem.provenance)
    if prov.get("source") != "profiled":
        raise ProfileError(f"{where}: provenance 'source' is {prov.get('source')!r}, not "
                           "'profiled' (only a profiled problem can be measured again)")
    for key in ("model", "config", "layers_per_stage"):
        if key not in prov:
            raise ProfileError(f"{where}: provenance has no field {key!r}")
    lps = prov["layers_per_stage"]
    if not isinstance(lps, list) or len(lps) != problem.S:
        raise ProfileError(f"{where}: provenance 'layers_per_stage' {lps!r} does not give "
                           f"{problem.S} stages")
    if tuple(problem.sizes) != size_grid(problem.B):
        raise ProfileError(f"{where}: field 'sizes' {list(problem.sizes)} is not the profiler's "
                           f"grid {list(size_grid(problem.B))} for B={problem.B}")
    threads = threads if threads is not None else int(prov.get("threads", 1))
    profiler = Profiler(
        str(prov["model"]), B=problem.B, grouping=Grouping(layers_per_stage=tuple(lps)),
        config=prov["config"], device=device or str(prov.get("device", "cpu")), threads=threads,
        repeats=repeats, warmup=warmup, optimizer=str(prov.get("optimizer", "adam")),
        dtype=str(prov.get("dtype", "float32")), seed=int(prov.get("seed", 0)),
        clock=str(prov.get("clock", "wall")), link=None, link_backend="gloo",
        progress=progress, log=log, co_run=False, locality=False, split_backward=True)
    say = log or (lambda _msg: None)
    started, load_start = time.perf_counter(), _loadavg()
    date = _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds")
    previous_threads = torch.get_num_threads()
    try:
        torch.set_num_threads(threads)
        profiler.load()
        if profiler.full_config != dict(prov["config"]):
            raise ProfileError(f"{where}: the model's resolved config "
                               f"{profiler.full_config!r} differs from the file's "
                               f"{prov['config']!r}")
        rigs = prepare_rigs(profiler.layers, check_layers_per_stage(tuple(lps),
                                                                    len(profiler.layers)),
                            profiler.inputs, profiler.targets, optimizer=profiler.optimizer,
                            seed=profiler.seed)
        say(f"split backward of {Path(path).name}: {problem.S} stages, sizes "
            f"{list(problem.sizes)}, {warmup} + {repeats} rounds, {threads} thread(s)")
        bar = _progress_bar(len(rigs) * len(problem.sizes) * (warmup + repeats),
                            str(prov["model"]), progress)
        try:
            meas = measure_cells(rigs, problem.sizes, profiler.spec.loss, profiler.timer,
                                 repeats=repeats, warmup=warmup, recompute=False, opt=False,
                                 split=True, progress=bar.update if bar is not None else None)
        finally:
            if bar is not None:
                bar.close()
        split_mem = [measure_split_memory(rig, problem.B, profiler.spec.loss) for rig in rigs]
    finally:
        torch.set_num_threads(previous_threads)
    stages = []
    for s, st in enumerate(problem.stages):
        sf = split_fields(meas, s, split_mem[s])
        memory = st.memory
        if memory is not None:
            memory = replace(memory, w_held_bytes_per_sample=float(split_mem[s].held))
        extra = dict(st.extra)
        extra["split_backward"] = {"noise": sf["noise"], "wbwd_after_ribwd": sf["rwbwd"],
                                   "memory": sf["split_memory"]}
        if memory is None:
            extra["split_backward"]["memory"]["w_held_bytes_per_sample"] = \
                float(split_mem[s].held)
        stages.append(replace(st, ibwd=sf["ibwd"], ribwd=sf["ribwd"], wbwd=sf["wbwd"],
                              memory=memory, extra=extra))
    prov["split_backward"] = {
        "date": date,
        "rounds": repeats,
        "warmup_rounds": warmup,
        "threads": threads,
        "torch": torch.__version__,
        "loadavg_start": load_start,
        "loadavg_end": _loadavg(),
        "seconds": round(time.perf_counter() - started, 1),
        "run_fwd": [[c.median for c in row] for row in meas.fwd],
        "run_bwd": [[c.median for c in row] for row in meas.bwd],
        "how": {
            "order": f"{warmup} warm-up round(s) discarded, then {repeats} rounds; each round "
            "visits every (stage, size) cell once at a rotating offset and runs its stash "
            "pass (F, B), split stash pass (F, I, W) and split recompute pass (F+I, W) in an "
            "order rotating by round; fwd, bwd, rbwd, opt and the links of this file come "
            "from the original profile, run_fwd / run_bwd are this run's own medians (compare "
            "with fwd / bwd for drift between the two runs)",
            **HOW_SPLIT,
        },
    }
    return scale_split_to_file(replace(problem, stages=tuple(stages), provenance=prov))


def scale_split_to_file(problem: Problem) -> Problem:
    """Put split-backward tables measured in another run on the file's footing.

    The run of :func:`split_backward_into` also times the fused stash backward (``run_bwd``
    in ``provenance.split_backward``); machine speed drifts between runs (15-45 % seen here),
    so raw ``ibwd + wbwd`` from one run set beside the file's ``bwd`` from another would favour
    one kind of schedule by the drift alone. Each cell's ``ibwd``, ``ribwd`` and ``wbwd`` is
    therefore scaled by the file's ``bwd`` over the run's ``bwd`` at that stage and size: the
    split keeps the ratios ``I / B`` and ``W / B`` measured within one run. The raw values are
    the stored ones times ``run_bwd / bwd``.
    """
    prov = dict(problem.provenance)
    sb = dict(prov["split_backward"])
    if sb.get("scaled"):
        return problem
    run_bwd = sb["run_bwd"]
    stages = []
    for s, st in enumerate(problem.stages):
        f = [b / r for b, r in zip(st.bwd, run_bwd[s])]
        stages.append(replace(st, **{k: tuple(v * x for v, x in zip(getattr(st, k), f))
                                     for k in ("ibwd", "ribwd", "wbwd")}))
    sb["scaled"] = ("ibwd, ribwd, wbwd scaled per (stage, size) by bwd / run_bwd: this file's "
                    "fused backward over the split run's own")
    prov["split_backward"] = sb
    return replace(problem, stages=tuple(stages), provenance=prov).validate()
