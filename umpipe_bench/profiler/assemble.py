"""Measurements -> :class:`Problem`: the stages' cost tables, the boundary links and the
provenance that says how every figure was taken (docs/MODEL.md §1).

Three named steps (:func:`stage_costs`, :func:`boundary_links`, :func:`provenance`) joined by
:func:`assemble`; :mod:`.profile` runs the measurements that feed them.
"""

from __future__ import annotations

import datetime as _dt
import math
import platform
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from ..problem import Link, Problem, StageCosts, StageMemory
from .engine import Measurements
from .link import LinkCalibration
from .locality import far_factor

__all__ = ["HOW", "HOW_SPLIT", "ProfileSettings", "assemble", "boundary_links", "provenance",
           "split_fields", "stage_costs"]


@dataclass(frozen=True)
class ProfileSettings:
    """How a profile was taken (recorded in the problem's provenance)."""

    device: str
    threads: int
    repeats: int
    warmup: int
    optimizer: str
    dtype: str
    seed: int
    clock: str
    co_runner: str | None
    grouping: str
    balance: str | None
    profile_seconds: float


#: How each figure is measured, by field (the provenance's ``how``; clock added per profile).
HOW: dict[str, str] = {
    "fwd": "median over rounds of the stage forward with autograd recording "
    "(last stage: + loss / B)",
    "bwd": "median of the backward that directly follows that forward (activations "
    "kept), from the output gradient to the stage input",
    "rbwd": "median of one interval: forward again with autograd + backward "
    "(measured as its own pass, not fwd + bwd added)",
    "noise": "stages[s].extra.noise: max/min over the rounds, per cell",
    "memory": "param_bytes = parameters + gradients + optimizer state; saved activations "
    "= storages autograd saves for backward (saved_tensors_hooks), without parameters "
    "and the stage input, at size B divided by B; input bytes = stage input / sample",
    "links": "act_bytes = stage output bytes per sample; grad_bytes = the next stage's "
    "input-gradient bytes per sample; latency/bandwidth: see link",
}

#: How the split-backward figures are measured (docs/MODEL.md §1c).
HOW_SPLIT: dict[str, str] = {
    "ibwd": "median of the input-gradient pass I (torch.autograd.grad w.r.t. the stage input, "
    "graph retained, gradients at the graph's parameter frontier kept) directly after the "
    "forward, in its own split stash pass; stage 0 (input needs no gradient) computes nothing "
    "in I, as torch's first stage",
    "ribwd": "median of one interval: forward again with autograd + I (split recompute pass)",
    "wbwd": "median of the weight-gradient pass W (per frontier node torch.autograd.grad from "
    "its kept gradient w.r.t. the parameters below it, accumulated into .grad) directly "
    "after the I of the same microbatch; stage 0: the whole backward w.r.t. the parameters",
    "w_held": "memory.w_held_bytes_per_sample = saved activations autograd still holds after "
    "I (saved_tensors_hooks boxes alive once the output is dropped; distinct storages without "
    "parameters and the stage input) + the kept frontier gradients, at size B divided by B; "
    "stages[s].extra.split_memory splits it and gives what W actually reads",
}


def _r(x: float) -> float | None:
    """Round a noise figure for the file (None for not-measured)."""
    return round(float(x), 3) if math.isfinite(x) else None


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


def split_fields(meas: Measurements, s: int, smem: Any | None) -> dict[str, Any]:
    """Stage ``s``'s split-backward tables (``ibwd``, ``ribwd``, ``wbwd``) and the
    ``extra`` records of their noise and memory (docs/MODEL.md §1c); {} when not measured."""
    if not meas.ibwd:
        return {}
    out: dict[str, Any] = {k: tuple(c.median for c in getattr(meas, k)[s])
                           for k in ("ibwd", "ribwd", "wbwd")}
    out["noise"] = {k: [_r(c.noise) for c in getattr(meas, k)[s]]
                    for k in ("ibwd", "ribwd", "wbwd")}
    out["rwbwd"] = [c.median for c in meas.rwbwd[s]]
    if smem is not None:
        out["split_memory"] = {
            "held_saved_bytes_per_sample": smem.held_saved,
            "held_grad_bytes_per_sample": smem.held_grads,
            "w_reads_bytes_per_sample": smem.w_reads,
            "saved_bytes_per_sample": smem.saved,
        }
    return out


def stage_costs(meas: Measurements, mem: Sequence[Any], rigs_layers: Sequence[tuple[int, int]],
                layer_names: Sequence[str],
                split_mem: Sequence[Any] | None = None) -> list[StageCosts]:
    """One :class:`StageCosts` per stage: median tables, memory, name, noise per cell."""
    stages = []
    for s, (a, b) in enumerate(rigs_layers):
        sf = split_fields(meas, s, split_mem[s] if split_mem else None)
        split_extra: dict[str, Any] = {}
        if sf:
            split_extra = {"split_backward": {"noise": sf["noise"],
                                              "wbwd_after_ribwd": sf["rwbwd"]}}
            if "split_memory" in sf:
                split_extra["split_backward"]["memory"] = sf["split_memory"]
        bwd_far, loc_extra = _locality(meas, s)
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
                    w_held_bytes_per_sample=(float(split_mem[s].held) if sf and split_mem
                                             else None),
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
                    **loc_extra,
                    **split_extra,
                },
                bwd_far=bwd_far,
                ibwd=sf.get("ibwd"),
                ribwd=sf.get("ribwd"),
                wbwd=sf.get("wbwd"),
            )
        )
    return stages


def _locality(meas: Measurements, s: int) -> tuple[float | None, dict[str, Any]]:
    """Stage ``s``'s factor ``bwd_far`` and its ``extra.locality`` record (None, {}: not
    measured)."""
    if not meas.locality or not meas.locality[s]:
        return None, {}
    rounds = meas.locality[s]
    factor, raw = far_factor(rounds)
    ratios = [r.ratio for r in rounds]
    return round(factor, 4), {"locality": {
        "sizes": list(meas.locality_sizes or ()),
        "ratio_median": round(raw, 4),
        "ratio_min": round(min(ratios), 4),
        "ratio_max": round(max(ratios), 4),
        "near_bwd_median": sorted(r.near_bwd for r in rounds)[len(rounds) // 2],
        "far_bwd_median": sorted(r.far_bwd for r in rounds)[len(rounds) // 2],
    }}


def boundary_links(mem: Sequence[Any], cal: LinkCalibration) -> list[Link]:
    """Boundary ``s -> s+1``: measured bytes per sample, the calibrated latency/bandwidth."""
    return [
        Link(
            act_bytes=float(mem[s].output_bytes_per_sample),
            grad_bytes=float(mem[s + 1].input_grad_bytes_per_sample),
            latency=cal.latency,
            bandwidth=cal.bandwidth,
        )
        for s in range(len(mem) - 1)
    ]


def _clock_text(st: ProfileSettings) -> str:
    if st.device.startswith("cuda"):
        return "CUDA events + synchronize"
    if st.clock == "thread-cpu":
        return "time.thread_time: CPU seconds of the one compute thread (not wall time)"
    return "time.perf_counter wall time (synchronous CPU ops)"


def provenance(model: str, config: dict[str, Any], lps: Sequence[int], meas: Measurements,
               cal: LinkCalibration, st: ProfileSettings) -> dict[str, Any]:
    """Where the numbers came from (docs/MODEL.md §1): model, grouping, device, versions,
    date, rounds, noise summary and how each figure was measured."""
    noise_all = [c.noise for table in (meas.fwd, meas.bwd, meas.rbwd) for row in table
                 for c in row if math.isfinite(c.noise)]
    how = {
        "order": f"{st.warmup} warm-up round(s) discarded, then {st.repeats} rounds; each round "
        "visits every (stage, size) cell and each stage's optimizer cell once, starting at "
        "a rotating offset; stash and recompute passes swap order every round",
        **{k: HOW[k] for k in ("fwd", "bwd", "rbwd")},
        "opt": f"median of one {st.optimizer} step over the stage parameters "
        "(gradients present)",
        "noise": HOW["noise"],
        "clock": _clock_text(st),
        "memory": HOW["memory"],
        "links": HOW["links"],
    }
    if meas.ibwd:
        how["order"] += ("; with the split backward each (stage, size) cell runs four passes "
                         "(stash, recompute, split stash F-I-W, split recompute FI-W) in an "
                         "order rotating by round")
        how.update(HOW_SPLIT)
    if meas.locality_sizes is not None:
        sizes = list(meas.locality_sizes)
        how["bwd_far"] = (
            f"median over the rounds of far/near summed-backward ratios: one locality cell per "
            f"stage and round runs the reference EDP({len(sizes)}) microbatches {sizes} of the "
            "mini-batch (M = 4, or B if B < 4) as F(1)..F(M) B(1)..B(M) (far) and "
            "F(1)B(1)..F(M)B(M) (near), both timed, order alternating by round; clamped to "
            "[0.25, 4]; raw ratios in stages[s].extra.locality")
    return {
        "source": "profiled",
        "model": model,
        "config": config,
        "layers_per_stage": list(lps),
        "device": st.device,
        "torch": torch.__version__,
        "threads": st.threads,
        "date": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "host": _host(st.device),
        "repeats": st.repeats,
        "warmup_rounds": st.warmup,
        "seed": st.seed,
        "clock": st.clock,
        "co_runner": st.co_runner,
        "dtype": st.dtype,
        "optimizer": st.optimizer,
        "grouping": st.grouping,
        "balance": st.balance,
        "profile_seconds": st.profile_seconds,
        "noise_max": _r(max(noise_all)) if noise_all else None,
        "noise_median": _r(sorted(noise_all)[len(noise_all) // 2]) if noise_all else None,
        "how": how,
        "link": cal.to_provenance(),
    }


def assemble(name: str, *, model: str, config: dict[str, Any], B: int, lps: Sequence[int],
             meas: Measurements, mem: Sequence[Any], cal: LinkCalibration,
             rigs_layers: Sequence[tuple[int, int]], layer_names: Sequence[str],
             settings: ProfileSettings, split_mem: Sequence[Any] | None = None) -> Problem:
    """The validated problem of one profile (``split_mem``: :mod:`.split` memory figures at
    size B when the split backward was measured)."""
    stages = stage_costs(meas, mem, rigs_layers, layer_names, split_mem)
    return Problem(
        name=name,
        B=B,
        sizes=meas.sizes,
        stages=tuple(stages),
        links=tuple(boundary_links(mem, cal)),
        provenance=provenance(model, config, lps, meas, cal, settings),
        description=f"{model} profiled on {settings.device}, B={B}, "
        f"{len(stages)} stages ({','.join(map(str, lps))} layers), "
        f"{settings.threads} thread(s)",
    ).validate()
