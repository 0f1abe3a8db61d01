"""The device simulator: per-device action lists over chunks -> timeline (docs/MODEL.md §4b).

Where :mod:`umpipe_bench.simulator` runs one chunk per stage, this one runs the schedules torch
ships, where a device may hold several chunks (interleaved, looped, V shape) and a backward may
be split into an input-gradient pass ``I`` and a weight-gradient pass ``W``. Its input is what
torch executes: one list per device of actions written ``{chunk}{kind}{microbatch}``
(``"0F1"``, ``"3I2"``, ``"3W2"``, ``"1B0"``). With ``sizes``, every microbatch has the same size
across chunks (torch cuts the batch once). With ``parts``, every chunk has its own forward,
backward and weight-gradient partitions of the samples (a chunk plan, docs/CHUNK-SCHEDULES.md),
and an action's index counts within its chunk's partition of its kind. Kinds and their
dependencies, for an action over samples ``[a, b)``:

* ``F(c, j)``: the outputs of chunk ``c-1``'s forwards of those samples have arrived (chunk 0:
  nothing); with equal sizes, ``F(c-1, j)``'s;
* ``B(c, j)`` / ``I(c, j)``: the chunk's own forwards of those samples have run, and the
  gradients from chunk ``c+1``'s ``B`` or ``I`` of those samples have arrived (the last chunk:
  nothing more);
* ``W(c, r)``: the chunk's own ``I`` of those samples have run (with equal sizes, ``I(c, r)``).

Each operation starts at ``max(its device's previous operation end, its dependencies)``.
An output crossing devices is a transfer on the directed link between the two devices: one
transfer at a time per direction, in production order, ``latency + m * bytes / bandwidth`` with
the bytes of the chunk boundary it crosses; consecutive chunks on one device exchange nothing.
An output leaves when its action ends, or, with ``send_after``, when a later action of its
device ends (torch's DualPipeV sends a paired forward's output after the pair's backward).
Compute and communication overlap. After its last operation a device runs the optimizer step of
each of its chunks; ``T`` is the latest device end.

``message_cpu = (a, b)``, off (``(0, 0)``) by default: the CPU time a cross-device message
costs the processes on both ends (posting the send, waiting on and unpacking the receive;
docs/TORCH-SCHEDULES.md §7), ``a + b * bytes`` seconds added to the action that produces it
and to the action that consumes it, on top of the transfer on the link. ``F(c, j)`` pays for
its input when chunk ``c-1`` lies on another device and for its output when chunk ``c+1``
does; ``B``/``I`` for the output gradient it receives from ``c+1`` and the input gradient it
sends to ``c-1``; ``W`` sends nothing. The bytes are the boundary's per-sample bytes times
the action's own microbatch size.

Costs per chunk and size come from the chunk problem (:func:`umpipe_bench.layout.group_layers`):
``F`` ``fwd``; ``B`` the mode's backward (``bwd``, far factor as in docs/MODEL.md §1b when
the device's previous operation is not the forward of the same chunk and samples; ``rbwd``
in recompute mode); ``I`` ``ibwd`` (stash) or ``ribwd`` (recompute); ``W`` ``wbwd``; each at
the action's own size, except a ``W`` of chunk 0 covering several ``I`` microbatches: the first
chunk's ``W`` is each microbatch's whole backward, so it costs the sum of ``wbwd`` at the sizes
of the ``I`` microbatches it covers (a later chunk's ``W`` runs as one call over all their
samples, :func:`umpipe_bench.runtime.split_backward.weight_grad_many`).

Memory per device (docs/MODEL.md §1c): static bytes of its chunks plus what its microbatches
hold. Stash: ``F`` adds the chunk's saved activations, ``B`` frees them, ``I`` frees all but
the bytes ``W`` still needs (``w_held``; all of them when not measured), ``W`` frees the rest.
Recompute: ``F`` adds the chunk's input bytes, and while ``F``, ``B`` or ``I`` runs the
microbatch's saved activations exist too; ``I`` swaps the input for ``w_held``; ``W`` frees it.

This module imports no torch.
"""

from __future__ import annotations

import re
from bisect import bisect_left, bisect_right
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

from .codec import balanced_sizes
from .errors import InputError
from .problem import Problem, StageMemory

__all__ = [
    "Action",
    "ChunkParts",
    "DevSimError",
    "DeviceTimeline",
    "edp_sizes",
    "parse_action",
    "simulate_devices",
]

_ACTION_RE = re.compile(r"^(\d+)([FBIW])(\d+)$")


#: action lists that cannot run on the problem (bad action, missing costs, deadlock)
DevSimError = InputError

#: per chunk, its forward, backward (``B`` or ``I``) and weight-gradient (``W``) microbatch
#: sizes, each summing to ``B``
ChunkParts = tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]

_PART = {"F": 0, "B": 1, "I": 1, "W": 2}


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
    """``M`` balanced microbatch sizes of ``B`` samples (larger first, like ``tensor_split``;
    :func:`.codec.balanced_sizes`)."""
    if not 1 <= M <= B:
        raise DevSimError(f"microbatches M must be in 1..B={B}, got {M}")
    return balanced_sizes(B, M)


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


def _ranges(sizes: Sequence[int]) -> list[tuple[int, int]]:
    out, a = [], 0
    for m in sizes:
        out.append((a, a + m))
        a += m
    return out


def _covering(ranges: list[tuple[int, int]], a: int, b: int) -> range:
    """Indices of the ``ranges`` (a partition of the samples, in order) that overlap
    ``[a, b)``."""
    ends = [r[1] for r in ranges]
    return range(bisect_right(ends, a), bisect_left(ends, b) + 1)


def _check_lists(lists: list[list[Action]], C: int, parts: Sequence[ChunkParts],
                 chunk_device: Sequence[int]) -> None:
    seen: dict[tuple[int, str, int], int] = {}
    for d, row in enumerate(lists):
        for a in row:
            if not 0 <= a.chunk < C:
                raise DevSimError(f"device {d}: action {a} names chunk {a.chunk}; the problem "
                                  f"has chunks 0..{C - 1}")
            n = len(parts[a.chunk][_PART[a.kind]])
            if not 0 <= a.mb < n:
                raise DevSimError(f"device {d}: action {a} names microbatch {a.mb}; expected "
                                  f"0..{n - 1}")
            if chunk_device[a.chunk] != d:
                raise DevSimError(f"device {d}: action {a} runs chunk {a.chunk}, which the "
                                  f"layout puts on device {chunk_device[a.chunk]}")
            key = (a.chunk, a.kind, a.mb)
            if key in seen:
                raise DevSimError(f"device {d}: action {a} appears twice")
            seen[key] = d
    for c in range(C):
        fw, bw, wg = (_ranges(x) for x in parts[c])
        for j in range(len(fw)):
            if (c, "F", j) not in seen:
                raise DevSimError(f"no action {c}F{j}: every chunk runs every microbatch")
        split = [(c, "I", j) in seen for j in range(len(bw))]
        for j, (lo, hi) in enumerate(bw):
            # the weight-gradient passes covering this microbatch's samples
            ws = list(_covering(wg, lo, hi))
            has_b, has_i = (c, "B", j) in seen, split[j]
            has_w = [(c, "W", r) in seen for r in ws]
            if has_b == has_i or (has_i and not all(has_w)) or (has_b and any(has_w)):
                w = f"one {c}W{ws[0]}" if len(ws) == 1 else "the W actions covering it"
                raise DevSimError(f"chunk {c} microbatch {j}: expected either one {c}B{j} or "
                                  f"one {c}I{j} and {w}")
        for r, (lo, hi) in enumerate(wg):
            if (c, "W", r) in seen and not all(split[j] for j in _covering(bw, lo, hi)):
                raise DevSimError(f"chunk {c}: {c}W{r} covers samples {lo}..{hi - 1}, whose "
                                  f"backwards must all be I actions")


def _chunk_parts(problem: Problem, C: int, sizes: Sequence[int] | None,
                 parts: Sequence[ChunkParts] | None) -> list[ChunkParts]:
    """The partitions of every chunk: ``parts`` as given, or ``sizes`` for every kind."""
    B = problem.B
    if parts is not None and sizes is not None:
        raise DevSimError("give either the microbatch sizes or per-chunk partitions (parts), "
                          "not both")
    if parts is None:
        if sizes is None:
            raise DevSimError("give the microbatch sizes or per-chunk partitions (parts)")
        sizes = tuple(int(m) for m in sizes)
        if not sizes or sum(sizes) != B or min(sizes) < 1:
            raise DevSimError(f"microbatch sizes {list(sizes)} must be positive and sum to "
                              f"B = {B}")
        return [(sizes, sizes, sizes)] * C
    if len(parts) != C:
        raise DevSimError(f"{len(parts)} chunk partitions for a problem of {C} chunks")
    out = []
    for c, triple in enumerate(parts):
        row = tuple(tuple(int(m) for m in x) for x in triple)
        for kind, x in zip(("fwd", "bwd", "wgt"), row):
            if not x or sum(x) != B or min(x) < 1:
                raise DevSimError(f"chunk {c} {kind} sizes {list(x)} must be positive and sum "
                                  f"to B = {B}")
        out.append(row)  # type: ignore[arg-type]
    return out  # type: ignore[return-value]


def simulate_devices(
    problem: Problem,
    chunk_device: Sequence[int],
    lists: Sequence[Sequence[str | Action]],
    sizes: Sequence[int] | None,
    mode: str = "stash",
    op_overhead: float = 0.0,
    *,
    parts: Sequence[ChunkParts] | None = None,
    message_cpu: tuple[float, float] = (0.0, 0.0),
    send_after: Sequence[Sequence[int]] | None = None,
    check: bool = True,
) -> DeviceTimeline:
    """Simulate one iteration of per-device action ``lists`` (module docstring).

    ``problem``: the chunk problem (stage ``c`` = chunk ``c``); ``chunk_device[c]``: the
    device of chunk ``c``; ``sizes[j]``: the size of microbatch ``j`` (summing to ``B``), the
    same in every chunk, or ``parts[c]`` (then ``sizes`` is None): chunk ``c``'s forward,
    backward and weight-gradient sizes (:data:`ChunkParts`); ``op_overhead``: seconds a
    runtime adds to every action beyond the profiled compute (torch's stage bookkeeping and
    point-to-point calls; docs/TORCH-SCHEDULES.md §7), 0 by default; ``message_cpu``: the
    CPU charge of a cross-device message on both ends (module docstring), off by default;
    ``send_after[d][i]``: the position ``k >= i`` in device ``d``'s list at whose end the
    outputs of its action ``i`` leave for another device (torch's runtime sends both outputs
    of an ``OVERLAP_F_B`` pair after its second action:
    :func:`umpipe_bench.torch_schedules.torch_send_after`); None: every action sends at its
    own end. ``check=False`` skips the check that the lists run every operation once on its
    chunk's device (for a caller that has checked the same lists, partitions and devices
    before).
    """
    if not op_overhead >= 0 or op_overhead == float("inf"):
        raise DevSimError(f"op_overhead must be a finite number of seconds >= 0, got "
                          f"{op_overhead!r}")
    msg_a, msg_b = _message_cpu(message_cpu)
    if mode not in ("stash", "recompute"):
        raise DevSimError(f"mode must be 'stash' or 'recompute', got {mode!r}")
    C, D = problem.S, len(lists)
    if len(chunk_device) != C:
        raise DevSimError(f"{len(chunk_device)} chunk devices for a problem of {C} chunks")
    cparts = _chunk_parts(problem, C, sizes, parts)
    if max(chunk_device) >= D or min(chunk_device) < 0:
        raise DevSimError(f"chunk devices {list(chunk_device)} must lie in 0..{D - 1}")
    acts = [[a if isinstance(a, Action) else parse_action(a) for a in row] for row in lists]
    if check:
        _check_lists(acts, C, cparts, chunk_device)
    held = _send_after(send_after, acts)
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
    # per chunk and kind (0 F, 1 B/I, 2 W): the sample range of every microbatch
    rng = [[_ranges(x) for x in cp] for cp in cparts]
    same = all(x == cparts[0][0] for cp in cparts for x in cp)
    # per chunk, the per-sample bytes of the messages its F (in, out) and B/I (in, out) pay
    # for (0 where the neighbour shares the device or there is none)
    msg_on = msg_a != 0.0 or msg_b != 0.0
    msg_f: list[tuple[float, float]] = []
    msg_g: list[tuple[float, float]] = []
    if msg_on:
        for c in range(C):
            up = c > 0 and chunk_device[c - 1] != chunk_device[c]
            down = c < C - 1 and chunk_device[c + 1] != chunk_device[c]
            msg_f.append((problem.links[c - 1].act_bytes if up else -1.0,
                          problem.links[c].act_bytes if down else -1.0))
            msg_g.append((problem.links[c].grad_bytes if down else -1.0,
                          problem.links[c - 1].grad_bytes if up else -1.0))

    def covering(c: int, k: int, lo: int, hi: int) -> range:
        return _covering(rng[c][k], lo, hi)

    # what each (chunk, kind, index) waits for: upstream forwards, own forwards, downstream
    # gradients, own input-gradient passes (indices into the chunks' partitions); with every
    # partition the same, microbatch j waits for microbatches j (ready_same)
    f_src: list[list[range]] = []
    g_own: list[list[range]] = []
    g_src: list[list[range]] = []
    w_own: list[list[range]] = []
    if not same:
        f_src = [[covering(c - 1, 0, lo, hi) if c else range(0) for lo, hi in rng[c][0]]
                 for c in range(C)]
        g_own = [[covering(c, 0, lo, hi) for lo, hi in rng[c][1]] for c in range(C)]
        g_src = [[covering(c + 1, 1, lo, hi) if c < C - 1 else range(0)
                  for lo, hi in rng[c][1]] for c in range(C)]
        w_own = [[covering(c, 1, lo, hi) for lo, hi in rng[c][2]] for c in range(C)]

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
    waiting: defaultdict[tuple[int, int], list[tuple[Action, int]]] = defaultdict(list)
    remaining = sum(len(r) for r in acts)

    def latest(table: dict[tuple[int, int], float], c: int, idx: range) -> float | None:
        t = None
        for k in idx:
            x = table.get((c, k))
            if x is None:
                return None
            t = x if t is None else max(t, x)
        return t

    def ready_same(a: Action) -> float | None:
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

    def ready(a: Action) -> float | None:
        c, j = a.chunk, a.mb
        if a.kind == "F":
            return 0.0 if c == 0 else latest(x_arr, c - 1, f_src[c][j])
        if a.kind == "W":
            return latest(g_end, c, w_own[c][j])
        own = latest(f_end, c, g_own[c][j])
        if own is None or c == C - 1:
            return own
        y = latest(y_arr, c + 1, g_src[c][j])
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

    def leave(b: Action, mb: int, t: float) -> None:
        """``b``'s output (size ``mb``) leaves its device at ``t``."""
        if b.kind == "F":
            if b.chunk < C - 1:
                x_arr[(b.chunk, b.mb)] = send(b.chunk, b.chunk + 1, t, tb.act[b.chunk, mb],
                                              str(b))
        elif b.kind in "BI" and b.chunk > 0:
            y_arr[(b.chunk, b.mb)] = send(b.chunk, b.chunk - 1, t, tb.grad[b.chunk - 1, mb],
                                          str(b))

    while remaining:
        progressed = False
        for d in range(D):
            row = acts[d]
            while pos[d] < len(row):
                a = row[pos[d]]
                r = ready_same(a) if same else ready(a)
                if r is None:
                    break
                c, j = a.chunk, a.mb
                m = cparts[c][_PART[a.kind]][j]
                if a.kind == "F":
                    cost = fwd[c, m]
                elif a.kind == "W" and c == 0 and not same:
                    # the first chunk's W is each covered I microbatch's whole backward
                    cost = 0.0
                    for k in w_own[0][j]:
                        lo, hi = rng[0][1][k]
                        cost += wgt[0, hi - lo]  # type: ignore[index]
                elif a.kind == "W":
                    cost = wgt[c, m]  # type: ignore[index]
                else:
                    prev = row[pos[d] - 1] if pos[d] else None
                    near = prev is not None and prev.kind == "F" and prev.chunk == c \
                        and rng[c][0][prev.mb] == rng[c][1][j]
                    if a.kind == "B":
                        cost = bwd_near[c, m] if near else bwd_far[c, m]
                    else:
                        cost = inp[c, m]  # type: ignore[index]
                        if mode == "stash" and not near:
                            cost *= far_factor[c]
                cost += op_overhead
                if msg_on and a.kind != "W":
                    for nb in (msg_f if a.kind == "F" else msg_g)[c]:
                        if nb >= 0.0:
                            cost += msg_a + msg_b * nb * m
                t0 = max(dev_free[d], r)
                t1 = t0 + cost
                dev_free[d] = t1
                busy[d] += cost
                placed[d].append((str(a), t0, t1))
                if a.kind == "F":
                    f_end[(c, j)] = t1
                elif a.kind in "BI":
                    g_end[(c, j)] = t1
                if held is None:
                    leave(a, m, t1)
                else:  # outputs held for this action leave first, then its own unless held
                    k = held[d][pos[d]]
                    if k != pos[d]:
                        waiting[(d, k)].append((a, m))
                    for b, mb in waiting.pop((d, pos[d]), ()):
                        leave(b, mb, t1)
                    if k == pos[d]:
                        leave(a, m, t1)
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
        device_end=device_end,
        peak_memory=device_peaks(problem, chunk_device, acts, None, mode, parts=cparts),
        chunk_device=tuple(chunk_device),
    )


def _send_after(value: Sequence[Sequence[int]] | None,
                acts: list[list[Action]]) -> list[list[int]] | None:
    """``send_after`` checked against the lists: one position per action, ``i <= k < len``;
    None when every action sends at its own end."""
    if value is None:
        return None
    rows = [list(r) for r in value]
    if len(rows) != len(acts):
        raise DevSimError(f"send_after has {len(rows)} rows for {len(acts)} devices")
    for d, (row, act) in enumerate(zip(rows, acts)):
        if len(row) != len(act):
            raise DevSimError(f"send_after: device {d} has {len(row)} positions for "
                              f"{len(act)} actions")
        for i, k in enumerate(row):
            if not (isinstance(k, int) and i <= k < len(act)):
                raise DevSimError(f"send_after: device {d}, action {i} ({act[i]}): expected "
                                  f"a position in {i}..{len(act) - 1}, got {k!r}")
    if all(k == i for row in rows for i, k in enumerate(row)):
        return None
    return rows


def _message_cpu(value: Any) -> tuple[float, float]:
    """``(a, b)``: seconds per message and per byte, both finite and >= 0."""
    try:
        a, b = (float(x) for x in value)
    except (TypeError, ValueError):
        raise DevSimError(f"message_cpu must be (seconds per message, seconds per byte), got "
                          f"{value!r}") from None
    for name, x in (("seconds per message", a), ("seconds per byte", b)):
        if not x >= 0 or x == float("inf"):
            raise DevSimError(f"message_cpu {name} must be finite and >= 0, got {x!r}")
    return a, b


def device_peaks(problem: Problem, chunk_device: Sequence[int], lists: Sequence[Sequence[Action]],
                 sizes: Sequence[int] | None, mode: str, *,
                 parts: Sequence[ChunkParts] | None = None) -> list[float] | None:
    """Peak bytes per device walking its action list (module docstring); None when a chunk
    lacks memory figures. ``sizes`` or ``parts`` as in :func:`simulate_devices`."""
    cparts = _chunk_parts(problem, problem.S, sizes, parts)
    mems = [st.memory for st in problem.stages]
    if any(m is None for m in mems):
        return None
    return peaks_of(mems, chunk_device, lists, cparts, mode)  # type: ignore[arg-type]


def peaks_of(mems: Sequence[StageMemory], chunk_device: Sequence[int],
             lists: Sequence[Sequence[Action]], cparts: Sequence[ChunkParts], mode: str
             ) -> list[float]:
    """:func:`device_peaks` from the chunks' memory figures (``mems[c]``) and partitions
    (``cparts[c]``) directly, no chunk problem needed (the search of torch's baselines checks
    a partition's memory before it groups and simulates it)."""
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
            c, m = a.chunk, cparts[a.chunk][_PART[a.kind]][a.mb]
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
