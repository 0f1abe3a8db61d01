"""A runtime calibration of torch's schedules (docs/TORCH-SCHEDULES.md §7): the cost of every
layer's actions inside torch.distributed.pipelining, and the CPU a message costs, each from
measurements of their own.

* :func:`design`: the calibration entries of a one-layer-per-stage problem, fixed by its layer
  count alone: GPipe on every two-chunk partition ``[k, L - k]`` (forward ``F`` and full
  backward ``B`` of every prefix and suffix of the layers) and ZB1P (``v = 2``) on every
  ``[k, 1, 1, L - k - 2]`` (``F``, input-gradient ``I`` and weight-gradient ``W`` of every
  prefix, of single layers and of every suffix), each at ``M = 2`` and ``M = 4``; with
  ``probes``, then the **schedule probes** (:func:`schedule_probes`): every other schedule
  torch ships on balanced partitions at the same ``M`` where torch accepts them, whose actions
  add chunk shapes and places the two families lack (one chunk of half the layers per rank,
  the interleaved and V layouts' chunks, ZB1P at one chunk per rank). They are off by default:
  in a sitting that ran them, the model fitted with and without their actions ranked the
  measured entries alike (docs/TORCH-SCHEDULES.md §7a).
* :func:`observations`: per entry, chunk and kind, the median over iterations of the time per
  action (``scripts/torch_schedule_ops.py``'s timed ``PipelineStage`` calls).
* :func:`decompose`: per microbatch size, non-negative least squares of those chunk times on
  per-layer, per-kind costs. A chunk's action costs the sum of its layers' as
  :func:`umpipe_bench.layout.group_layers` adds them; the first chunk's ``I`` is layer 0's
  alone and its ``W`` is its whole backward (layer 0's ``W``, every other layer's ``I`` and
  ``W``), as torch's first stage computes no input gradient.
* :func:`message_charge`: ``(a, b)`` of the CPU charge per message end, ``a + b * bytes``,
  fitted (non-negative least squares) to the exchange measurement (one send and one receive on
  each side per exchange: two message ends).
* :func:`calibrated_problem`: the problem with its ``fwd``, ``bwd``, ``ibwd``, ``wbwd`` replaced
  by the decomposed costs (sizes not calibrated: the profile times the layer's calibrated over
  profiled ratio of that kind; at least 0.1 us, a problem's costs being positive),
  ``bwd_far = 1`` (the in-runtime ``B`` is measured where torch runs it), ``rbwd = F + B`` and
  ``ribwd = F + I`` (torch's runtime keeps activations; no recompute is calibrated), and the
  message charge in ``provenance["runtime_calibration"]``, which :func:`runtime_model` reads.

Imports no torch.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import UmpipeError
from ..problem import Problem

__all__ = ["KINDS", "Observation", "calibrated_problem", "decompose", "design",
           "message_charge", "observations", "runtime_model", "schedule_probes"]

KINDS = ("F", "B", "I", "W")
_ATTR = {"F": "fwd", "B": "bwd", "I": "ibwd", "W": "wbwd"}
#: the least cost of a calibrated action (a problem's costs are positive), seconds
_FLOOR = 1e-7
#: microbatch counts of the calibration entries
CAL_M = (2, 4)


@dataclass(frozen=True)
class Observation:
    """One chunk's action of one kind at one microbatch size: layers ``[a, b)``, seconds."""

    kind: str
    a: int
    b: int
    m: int
    seconds: float


def design(L: int, B: int, Ms: Sequence[int] = CAL_M,
           probes: bool = False) -> list[dict[str, Any]]:
    """The calibration entries of a model of ``L`` layers and batch ``B`` (module docstring);
    ``probes``: the schedule probes after them."""
    if L < 4:
        raise UmpipeError(f"a runtime calibration needs at least 4 layers, got {L}")
    out = []
    for M in Ms:
        if B % M:
            continue
        for k in range(1, L):
            out.append({"schedule": "gpipe", "torch_class": "ScheduleGPipe", "M": M,
                        "partition": [k, L - k], "v": 1})
        for k in range(1, L - 2):
            out.append({"schedule": "zb1p", "torch_class": "ScheduleInterleavedZeroBubble",
                        "M": M, "partition": [k, 1, 1, L - k - 2], "v": 2})
    return out + (schedule_probes(L, B, Ms) if probes else [])


#: the chunks per rank each schedule is probed at (every layout torch's schedules take on two
#: ranks: one chunk, two in loop order, the V shape)
_PROBE_V = {"1f1b": (1,), "interleaved-1f1b": (2,), "looped-bfs": (2,), "zb1p": (1, 2),
            "zbv": (2,), "dualpipev": (2,)}
#: ranks of a calibration run
_D = 2


def schedule_probes(L: int, B: int, Ms: Sequence[int] = CAL_M) -> list[dict[str, Any]]:
    """Every schedule but GPipe on the balanced partition of ``L`` layers into its chunks
    (:func:`umpipe_bench.layout.balanced_counts`), at each ``M`` of ``Ms`` dividing ``B`` that
    torch accepts (DualPipeV needs ``M >= 4`` on two ranks), ``zb1p`` at one and two chunks per
    rank: fixed by ``L`` and ``B`` alone, like the rest of the design."""
    from ..layout import balanced_counts
    from ..torch_schedules import TORCH_SCHEDULES
    from ..torch_schedules.orders import ScheduleShapeError, check

    out = []
    for name, vs in _PROBE_V.items():
        info = TORCH_SCHEDULES[name]
        for v in vs:
            for M in Ms:
                if B % M:
                    continue
                try:
                    check(name, _D, M, v)
                except ScheduleShapeError:
                    continue
                out.append({"schedule": name, "torch_class": info.torch_class, "M": M,
                            "partition": list(balanced_counts(L, _D * v)), "v": v})
    return out


def observations(entries: Iterable[dict[str, Any]], B: int,
                 ranks: Sequence[dict[str, list[dict[str, Any]]]]) -> list[Observation]:
    """Per entry (timed by ``scripts/torch_schedule_ops.py run``: ``ranks[r][label]`` is a list
    of iterations whose ``ops`` are ``(kind, chunk, t0, t1)``), chunk and kind: the median over
    iterations of the chunk's summed time of that kind over its action count."""
    out = []
    for e in entries:
        label = f"{e['schedule']}:M{e['M']}:" + "-".join(map(str, e["partition"]))
        ends = np.cumsum([0, *e["partition"]]).tolist()
        m = B // e["M"]
        for rank in ranks:
            its = rank.get(label)
            if not its:
                continue
            acc: dict[tuple[str, int], list[float]] = defaultdict(list)
            count: dict[tuple[str, int], int] = defaultdict(int)
            for kind, c, _t0, _t1 in its[0]["ops"]:
                if kind != "wait":
                    count[(kind, c)] += 1
            for it in its:
                per: dict[tuple[str, int], float] = defaultdict(float)
                for kind, c, t0, t1 in it["ops"]:
                    if kind != "wait":
                        per[(kind, c)] += t1 - t0
                for key, v in per.items():
                    acc[key].append(v)
            for (kind, c), v in sorted(acc.items()):
                out.append(Observation(kind, int(ends[c]), int(ends[c + 1]), m,
                                       statistics.median(v) / count[(kind, c)]))
    return out


def _row(o: Observation, L: int) -> np.ndarray:
    """The observation's coefficients over the unknowns ``[F(L), B(L), I(L), W(L)]``."""
    r = np.zeros(4 * L)
    k = KINDS.index(o.kind)
    if o.a == 0 and o.kind == "I":
        r[2 * L] = 1.0
    elif o.a == 0 and o.kind == "W":
        r[3 * L] = 1.0
        r[2 * L + 1:2 * L + o.b] = 1.0
        r[3 * L + 1:3 * L + o.b] = 1.0
    else:
        r[k * L + o.a:k * L + o.b] = 1.0
    return r


def decompose(obs: Sequence[Observation], L: int) -> dict[int, dict[str, np.ndarray]]:
    """Per microbatch size in ``obs``: per kind, the ``L`` per-layer costs (seconds, >= 0) whose
    chunk sums best fit the observed chunk times (least squares, module docstring). A layer and
    kind no observation covers is NaN."""
    from scipy.optimize import nnls

    out = {}
    for m in sorted({o.m for o in obs}):
        rows = [o for o in obs if o.m == m]
        A = np.array([_row(o, L) for o in rows])
        y = np.array([o.seconds for o in rows])
        seen = A.any(axis=0)
        x = np.full(4 * L, np.nan)
        x[seen], _ = nnls(A[:, seen], y, maxiter=50 * A.shape[1])
        out[m] = {k: x[i * L:(i + 1) * L] for i, k in enumerate(KINDS)}
    return out


def message_charge(rows: Sequence[dict[str, float]]) -> tuple[float, float]:
    """``(a, b)``: seconds per message end and per byte from an exchange measurement (rows of
    ``bytes`` and ``per_exchange_s``: one send and one receive per side, so two message ends)."""
    from scipy.optimize import nnls

    if len(rows) < 2:
        raise UmpipeError(f"the exchange measurement needs at least 2 message sizes, got "
                          f"{len(rows)}")
    A = np.array([[1.0, float(r["bytes"])] for r in rows])
    scale = float(A[:, 1].max()) or 1.0
    A[:, 1] /= scale
    y = np.array([float(r["per_exchange_s"]) / 2.0 for r in rows])
    (a, b), _ = nnls(A, y)
    return float(a), float(b) / scale


def calibrated_problem(problem: Problem, costs: dict[int, dict[str, np.ndarray]],
                       message_cpu: tuple[float, float], meta: dict[str, Any]) -> Problem:
    """``problem`` with its action costs replaced by the decomposed ones (module docstring)."""
    d = problem.to_dict()
    sizes = list(problem.sizes)
    cal = [m for m in sorted(costs) if m in sizes]
    if not cal:
        raise UmpipeError(f"no calibrated microbatch size is among the problem's sizes {sizes}")
    for layer, st in enumerate(d["stages"]):
        for kind in KINDS:
            attr = _ATTR[kind]
            if st.get(attr) is None:
                continue
            prof = [float(x) for x in st[attr]]
            got = {m: float(costs[m][kind][layer]) for m in cal
                   if not np.isnan(costs[m][kind][layer])}
            if not got:
                continue
            p_sum = sum(prof[sizes.index(m)] for m in got)
            ratio = sum(got.values()) / p_sum if p_sum > 0 else 1.0
            st[attr] = [max(got[m] if m in got else prof[i] * ratio, _FLOOR)
                        for i, m in enumerate(sizes)]
        st["bwd_far"] = 1.0
        # no recompute in torch's runtime: the recompute tables are a forward again plus the
        # backward (or I), kept consistent with the calibrated costs
        st["rbwd"] = [f + b for f, b in zip(st["fwd"], st["bwd"])]
        if st.get("ribwd") is not None and st.get("ibwd") is not None:
            st["ribwd"] = [f + i for f, i in zip(st["fwd"], st["ibwd"])]
    d["name"] = f"{problem.name}-runtime"
    d["description"] = (f"{problem.name}: action costs calibrated inside torch's runtime "
                        "(umpipe_bench.runtime.calibration)")
    prov = dict(d.get("provenance") or {})
    prov["runtime_calibration"] = {**meta, "calibrated_sizes": cal,
                                   "message_cpu": [float(message_cpu[0]),
                                                   float(message_cpu[1])]}
    d["provenance"] = prov
    return Problem.from_dict(d).validate()


def runtime_model(problem: Problem) -> tuple[float, float]:
    """The message charge a calibrated problem carries; ``(0, 0)`` (off) for any other."""
    cal = (problem.provenance or {}).get("runtime_calibration")
    if not cal:
        return (0.0, 0.0)
    a, b = cal["message_cpu"]
    return (float(a), float(b))

