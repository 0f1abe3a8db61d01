"""The device simulator: per-device action lists over chunks -> timeline (docs/MODEL.md §4b).

Where :mod:`umpipe_bench.simulator` runs one chunk per stage, this one runs the schedules torch
ships, where a device may hold several chunks (interleaved, looped, V shape) and a backward may
be split into an input-gradient pass ``I`` and a weight-gradient pass ``W``. Its input is what
torch executes: one list per device of actions written ``{chunk}{kind}{microbatch}``
(``"0F1"``, ``"3I2"``, ``"3W2"``, ``"1B0"``), every microbatch of the same size across chunks
(torch cuts the batch once). Kinds and their dependencies:

* ``F(c, j)``: chunk ``c-1``'s ``F(c-1, j)`` output has arrived (chunk 0: nothing);
* ``B(c, j)`` / ``I(c, j)``: the chunk's own ``F(c, j)`` has run, and the gradient from chunk
  ``c+1``'s ``B`` or ``I`` of ``j`` has arrived (the last chunk: nothing more);
* ``W(c, j)``: the chunk's own ``I(c, j)`` has run.

Each operation starts at ``max(its device's previous operation end, its dependencies)``.
An output crossing devices is a transfer on the directed link between the two devices: one
transfer at a time per direction, in production order, ``latency + m * bytes / bandwidth`` with
the bytes of the chunk boundary it crosses; consecutive chunks on one device exchange nothing.
Compute and communication overlap. After its last operation a device runs the optimizer step of
each of its chunks; ``T`` is the latest device end.

Costs per chunk and size come from the chunk problem (:func:`umpipe_bench.layout.group_layers`):
``F`` ``fwd``; ``B`` the mode's backward (``bwd``, far factor as in docs/MODEL.md §1b when
the device's previous operation is not the forward of the same chunk and microbatch; ``rbwd``
in recompute mode); ``I`` ``ibwd`` (stash) or ``ribwd`` (recompute); ``W`` ``wbwd``.

Memory per device (docs/MODEL.md §1c): static bytes of its chunks plus what its microbatches
hold. Stash: ``F`` adds the chunk's saved activations, ``B`` frees them, ``I`` frees all but
the bytes ``W`` still needs (``w_held``; all of them when not measured), ``W`` frees the rest.
Recompute: ``F`` adds the chunk's input bytes, and while ``F``, ``B`` or ``I`` runs the
microbatch's saved activations exist too; ``I`` swaps the input for ``w_held``; ``W`` frees it.

This module imports no torch.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .errors import InputError
from .problem import Problem

__all__ = [
    "Action",
    "DevSimError",
    "DeviceTimeline",
    "edp_sizes",
    "parse_action",
    "simulate_devices",
]

_ACTION_RE = re.compile(r"^(\d+)([FBIW])(\d+)$")


#: action lists that cannot run on the problem (bad action, missing costs, deadlock)
DevSimError = InputError


@dataclass(frozen=True, slots=True)
class Action:
    chunk: int
    kind: str
    mb: int

    def __str__(self) -> str:
        return f"{self.chunk}{self.kind}{self.mb}"


def parse_action(text: str) -> Action:
    """``"3I2"`` -> ``Action(chunk=3, kind="I", mb=2)``; one clear error otherwise."""
    m = _ACTION_RE.match(str(text).strip())
    if not m:
        raise DevSimError(f"action {text!r}: expected {{chunk}}{{F|B|I|W}}{{microbatch}}, "
                          "e.g. 0F1")
    return Action(int(m.group(1)), m.group(2), int(m.group(3)))


def edp_sizes(B: int, M: int) -> tuple[int, ...]:
    """``M`` balanced microbatch sizes of ``B`` samples (larger first, like ``tensor_split``)."""
    if not 1 <= M <= B:
        raise DevSimError(f"microbatches M must be in 1..B={B}, got {M}")
    q, r = divmod(B, M)
    return tuple(q + 1 if j < r else q for j in range(M))


@dataclass
class DeviceTimeline:
    """One simulated iteration on devices: every op placed in time, per-device summaries."""

    iteration_time: float
    #: per device, its ops in execution order: (action, t0, t1); the optimizer is "opt"
    ops: list[list[tuple[str, float, float]]]
    #: transfers: (src device, dst device, what, t0, t1), what = "0F1->1" style label
    transfers: list[tuple[int, int, str, float, float]]
    busy: list[float]
    device_end: list[float]
    peak_memory: list[float] | None = None
    chunk_device: tuple[int, ...] = field(default_factory=tuple)

    @property
    def D(self) -> int:
        return len(self.busy)

    @property
    def bubble(self) -> list[float]:
        T = self.iteration_time
        return [1.0 - b / T if T > 0 else 0.0 for b in self.busy]

    def to_dict(self, with_events: bool = False) -> dict[str, Any]:
        out: dict[str, Any] = {
            "iteration_time": self.iteration_time,
            "chunk_device": list(self.chunk_device),
            "devices": [
                {"device": d, "busy_time": self.busy[d], "bubble_fraction": self.bubble[d],
                 "end_time": self.device_end[d],
                 "peak_memory_bytes": None if self.peak_memory is None else self.peak_memory[d]}
                for d in range(self.D)
            ],
        }
        if with_events:
            out["device_ops"] = [[a for a, _, _ in row if a != "opt"] for row in self.ops]
            out["ops"] = [[{"action": a, "t0": t0, "t1": t1} for a, t0, t1 in row]
                          for row in self.ops]
            out["transfers"] = [{"src": s, "dst": d, "what": w, "t0": t0, "t1": t1}
                                for s, d, w, t0, t1 in self.transfers]
        return out


def _check_lists(lists: list[list[Action]], C: int, M: int,
                 chunk_device: Sequence[int]) -> None:
    seen: dict[tuple[int, str, int], int] = {}
    for d, row in enumerate(lists):
        for a in row:
            if not 0 <= a.chunk < C:
                raise DevSimError(f"device {d}: action {a} names chunk {a.chunk}; the problem "
                                  f"has chunks 0..{C - 1}")
            if not 0 <= a.mb < M:
                raise DevSimError(f"device {d}: action {a} names microbatch {a.mb}; expected "
                                  f"0..{M - 1}")
            if chunk_device[a.chunk] != d:
                raise DevSimError(f"device {d}: action {a} runs chunk {a.chunk}, which the "
                                  f"layout puts on device {chunk_device[a.chunk]}")
            key = (a.chunk, a.kind, a.mb)
            if key in seen:
                raise DevSimError(f"device {d}: action {a} appears twice")
            seen[key] = d
    for c in range(C):
        for j in range(M):
            has_b = (c, "B", j) in seen
            has_iw = (c, "I", j) in seen, (c, "W", j) in seen
            if (c, "F", j) not in seen:
                raise DevSimError(f"no action {c}F{j}: every chunk runs every microbatch")
            if has_b == any(has_iw) or (any(has_iw) and not all(has_iw)):
                raise DevSimError(f"chunk {c} microbatch {j}: expected either one {c}B{j} or "
                                  f"one {c}I{j} and one {c}W{j}")


def simulate_devices(
    problem: Problem,
    chunk_device: Sequence[int],
    lists: Sequence[Sequence[str | Action]],
    sizes: Sequence[int],
    mode: str = "stash",
    op_overhead: float = 0.0,
) -> DeviceTimeline:
    """Simulate one iteration of per-device action ``lists`` (module docstring).

    ``problem``: the chunk problem (stage ``c`` = chunk ``c``); ``chunk_device[c]``: the
    device of chunk ``c``; ``sizes[j]``: the size of microbatch ``j`` (summing to ``B``);
    ``op_overhead``: seconds a runtime adds to every action beyond the profiled compute (torch's
    stage bookkeeping and point-to-point calls; docs/TORCH-SCHEDULES.md §7), 0 by default.
    """
    if not op_overhead >= 0 or op_overhead == float("inf"):
        raise DevSimError(f"op_overhead must be a finite number of seconds >= 0, got "
                          f"{op_overhead!r}")
    if mode not in ("stash", "recompute"):
        raise DevSimError(f"mode must be 'stash' or 'recompute', got {mode!r}")
    C, D, M = problem.S, len(lists), len(sizes)
    if len(chunk_device) != C:
        raise DevSimError(f"{len(chunk_device)} chunk devices for a problem of {C} chunks")
    if sum(sizes) != problem.B or min(sizes) < 1:
        raise DevSimError(f"microbatch sizes {list(sizes)} must be positive and sum to "
                          f"B = {problem.B}")
    if max(chunk_device) >= D or min(chunk_device) < 0:
        raise DevSimError(f"chunk devices {list(chunk_device)} must lie in 0..{D - 1}")
    acts = [[a if isinstance(a, Action) else parse_action(a) for a in row] for row in lists]
    _check_lists(acts, C, M, chunk_device)
    tb = problem.tables()
    split = any(a.kind in "IW" for row in acts for a in row)
    if split and not problem.has_split_backward:
        raise DevSimError(f"problem {problem.name!r} has no split-backward costs (ibwd, ribwd, "
                          "wbwd), which schedules with I and W operations need; profile them "
                          "with `umpipe-bench profile --split-backward-into FILE`")
    fwd = tb.fwd
    bwd_near, bwd_far = tb.backward(mode), tb.backward_far(mode)
    inp = tb.input_backward(mode) if split else None
    wgt = tb.wbwd
    far_factor = [problem.far_factor(c) for c in range(C)]

    f_end: dict[tuple[int, int], float] = {}
    g_end: dict[tuple[int, int], float] = {}  # end of B or I of (chunk, mb)
    x_arr: dict[tuple[int, int], float] = {}  # activation of (chunk, mb) at chunk+1's device
    y_arr: dict[tuple[int, int], float] = {}  # gradient of (chunk, mb) at chunk-1's device
    link_free: dict[tuple[int, int], float] = {}
    dev_free = [0.0] * D
    busy = [0.0] * D
    pos = [0] * D
    placed: list[list[tuple[str, float, float]]] = [[] for _ in range(D)]
    transfers: list[tuple[int, int, str, float, float]] = []
    remaining = sum(len(r) for r in acts)

    def ready(a: Action) -> float | None:
        c, j = a.chunk, a.mb
        if a.kind == "F":
            return 0.0 if c == 0 else x_arr.get((c - 1, j))
        if a.kind == "W":
            return g_end.get((c, j))
        own = f_end.get((c, j))
        if own is None or c == C - 1:
            return own
        y = y_arr.get((c + 1, j))
        return None if y is None else max(own, y)

    def send(src_chunk: int, dst_chunk: int, t: float, cost: float, label: str) -> float:
        s, d = chunk_device[src_chunk], chunk_device[dst_chunk]
        if s == d:
            return t
        c0 = max(link_free.get((s, d), 0.0), t)
        c1 = c0 + cost
        link_free[(s, d)] = c1
        transfers.append((s, d, label, c0, c1))
        return c1

    while remaining:
        progressed = False
        for d in range(D):
            row = acts[d]
            while pos[d] < len(row):
                a = row[pos[d]]
                r = ready(a)
                if r is None:
                    break
                c, j, m = a.chunk, a.mb, sizes[a.mb]
                if a.kind == "F":
                    cost = fwd[c, m]
                elif a.kind == "W":
                    cost = wgt[c, m]  # type: ignore[index]
                else:
                    prev = row[pos[d] - 1] if pos[d] else None
                    near = prev is not None and prev.kind == "F" and prev.chunk == c \
                        and prev.mb == j
                    if a.kind == "B":
                        cost = bwd_near[c, m] if near else bwd_far[c, m]
                    else:
                        cost = inp[c, m]  # type: ignore[index]
                        if mode == "stash" and not near:
                            cost *= far_factor[c]
                cost += op_overhead
                t0 = max(dev_free[d], r)
                t1 = t0 + cost
                dev_free[d] = t1
                busy[d] += cost
                placed[d].append((str(a), t0, t1))
                if a.kind == "F":
                    f_end[(c, j)] = t1
                    if c < C - 1:
                        x_arr[(c, j)] = send(c, c + 1, t1, tb.act[c, m], str(a))
                elif a.kind in "BI":
                    g_end[(c, j)] = t1
                    if c > 0:
                        y_arr[(c, j)] = send(c, c - 1, t1, tb.grad[c - 1, m], str(a))
                pos[d] += 1
                remaining -= 1
                progressed = True
        if not progressed:
            stuck = [str(acts[d][pos[d]]) for d in range(D) if pos[d] < len(acts[d])]
            raise DevSimError(f"the action lists deadlock: no operation can start; "
                              f"waiting: {stuck}")

    device_end = []
    for d in range(D):
        t0 = dev_free[d]
        opt = sum(float(tb.opt[c]) for c in range(C) if chunk_device[c] == d)
        busy[d] += opt
        placed[d].append(("opt", t0, t0 + opt))
        device_end.append(t0 + opt)
    return DeviceTimeline(
        iteration_time=max(device_end), ops=placed, transfers=transfers, busy=busy,
        device_end=device_end, peak_memory=device_peaks(problem, chunk_device, acts, sizes, mode),
        chunk_device=tuple(chunk_device),
    )


def device_peaks(problem: Problem, chunk_device: Sequence[int], lists: Sequence[Sequence[Action]],
                 sizes: Sequence[int], mode: str) -> list[float] | None:
    """Peak bytes per device walking its action list (module docstring); None when a chunk
    lacks memory figures."""
    mems = [st.memory for st in problem.stages]
    if any(m is None for m in mems):
        return None
    saved = [m.saved_act_bytes_per_sample for m in mems]  # type: ignore[union-attr]
    inp = [m.input_bytes_per_sample for m in mems]  # type: ignore[union-attr]
    held = [m.w_held_bytes_per_sample if m.w_held_bytes_per_sample is not None  # type: ignore
            else m.saved_act_bytes_per_sample for m in mems]  # type: ignore[union-attr]
    peaks = []
    for d, row in enumerate(lists):
        static = sum(m.param_bytes for c, m in enumerate(mems)  # type: ignore[union-attr]
                     if chunk_device[c] == d)
        live = peak = 0.0
        for a in row:
            c, m = a.chunk, sizes[a.mb]
            if mode == "stash":
                if a.kind == "F":
                    live += saved[c] * m
                elif a.kind == "B":
                    live -= saved[c] * m
                elif a.kind == "I":
                    live -= (saved[c] - min(held[c], saved[c])) * m
                else:
                    live -= min(held[c], saved[c]) * m
                peak = max(peak, live)
            else:
                if a.kind == "F":
                    live += inp[c] * m
                    peak = max(peak, live + saved[c] * m)
                elif a.kind == "B":
                    peak = max(peak, live + saved[c] * m)
                    live -= inp[c] * m
                elif a.kind == "I":
                    peak = max(peak, live + saved[c] * m)
                    live += (held[c] - inp[c]) * m
                    peak = max(peak, live)
                else:
                    live -= held[c] * m
        peaks.append(static + peak)
    return peaks
