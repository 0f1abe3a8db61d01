"""The chunk rule: a chunk plan -> per-device action lists of F, B, I and W
(docs/CHUNK-SCHEDULES.md §2).

This is the capped rule of docs/SCHEDULES.md §2 extended to several chunks per device and to
the split backward. Each device decides what it *wants* next from its own state only:

1. a **forced W**: when the samples it holds between ``I`` and ``W`` exceed ``w_caps[d]`` and
   some ``W`` has all its ``I`` passes ordered, the oldest such ``W``;
2. else a **forward**: its *first* forward (below) if taking it keeps its in-flight samples
   (forwarded, not yet backwarded, over all its chunks) within ``caps[d]``, or if none of its
   backwards is *possible* yet;
3. else its first possible **backward** (``B``, or ``I`` under ``split``);
4. else, all its forwards and backwards ordered, its pending ``W`` passes, oldest first.

A forward or backward is *possible* when what it needs from the device's own chunks is
ordered (a forward: the same device's upstream chunk carrying its samples; a backward: its own
forwards, and the same device's downstream chunk's backwards carrying its samples). The
*first* of several possible ones is the smallest key: a forward of samples ``[a, b)`` of
chunk ``c``, the ``k``-th on its device, has key ``(x // group, k, x)`` with
``x = a + fwd_lag[c]``, a backward ``(y // group, -k, y)`` with ``y = a + bwd_lag[c]`` (rounds
of ``group`` samples: the first chunk's forwards of a round before the second's, the last
chunk's backwards before the first's, as torch's interleaved schedules order them; lags shift
a chunk's place, as the V shape wants).

A wanted operation is *ordered* once its inputs are ordered (a forward: the upstream chunk's
forward carrying its last sample; a backward: its own forward and the downstream chunk's
backward carrying its last sample; a W: the I passes it covers). When every device is blocked:

1. the most downstream chunk whose next backward can be ordered takes it (no cap exceeded);
2. else the most upstream chunk whose next forward can be ordered within its device's cap;
3. else the most upstream chunk whose next forward can be ordered takes it past the cap.

One of them always exists (docs/CHUNK-SCHEDULES.md §3), so every valid plan gets complete
lists in a global order that puts every operation after its inputs. With one chunk per
device and no split this is :func:`umpipe_bench.schedules.capped_order` exactly.

This module imports no torch.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from .chunkplan import ChunkPlan
from .devsim import Action

__all__ = ["FALLBACKS", "ChunkSchedule", "chunk_order", "format_lists"]

#: the fallbacks, in the order the rule tries them (docs/CHUNK-SCHEDULES.md §2)
FALLBACKS = ("backward", "forward", "past-cap")


@dataclass(frozen=True)
class ChunkSchedule:
    """The rule's result: per-device lists, the global order it ordered them in, and every
    fallback that fired, as ``(position in order, device, kind)`` with kind in
    :data:`FALLBACKS`."""

    lists: list[list[Action]]
    order: list[Action]
    fallbacks: list[tuple[int, int, str]]

    def names(self) -> list[list[str]]:
        """The lists as torch writes actions (``"0F1"``, ``"3I2"``)."""
        return [[str(a) for a in row] for row in self.lists]

    @property
    def past_cap(self) -> int:
        """How many forwards were taken past their device's cap."""
        return sum(1 for _, _, k in self.fallbacks if k == "past-cap")


def _ranges(sizes: tuple[int, ...]) -> list[tuple[int, int]]:
    out, a = [], 0
    for m in sizes:
        out.append((a, a + m))
        a += m
    return out


def chunk_order(plan: ChunkPlan, visit: Sequence[int] | None = None) -> ChunkSchedule:
    """Per-device action lists of ``plan`` under the chunk rule (module docstring;
    docs/CHUNK-SCHEDULES.md §2). Deterministic; the lists do not depend on ``visit``, the
    order in which each sweep visits the devices (default ``0..D-1``; §2, "Order of
    visits"), only the global order does."""
    C, D = plan.C, plan.D
    dev = plan.devices
    local = [0] * C
    for chunks in plan.device_chunks:
        for k, c in enumerate(chunks):
            local[c] = k
    K, KW, G = plan.effective_caps(), plan.effective_w_caps(), plan.effective_group()
    flag, blag = plan.effective_lags()
    fr = [_ranges(p) for p in plan.fwd]
    gr = [_ranges(q) for q in plan.bwd]
    wr = [_ranges(r) for r in plan.wgt] if plan.split and plan.wgt is not None else [[]] * C
    gkind = "I" if plan.split else "B"
    nf, ng, nw = [0] * C, [0] * C, [0] * C
    done_f, done_g = [0] * C, [0] * C
    load, pend = [0] * D, [0] * D
    complete = [0] * C  # W's of the chunk whose I's are all ordered
    wq: list[deque[int]] = [deque() for _ in range(D)]  # chunks of complete W's, oldest first
    lists: list[list[Action]] = [[] for _ in range(D)]
    order: list[Action] = []
    fallbacks: list[tuple[int, int, str]] = []

    def f_orderable(c: int) -> bool:
        return c == 0 or done_f[c - 1] >= fr[c][nf[c]][1]

    def f_possible(c: int) -> bool:
        return nf[c] < len(fr[c]) and (c == 0 or dev[c - 1] != dev[c] or f_orderable(c))

    def g_orderable(c: int) -> bool:
        b = gr[c][ng[c]][1]
        return done_f[c] >= b and (c == C - 1 or done_g[c + 1] >= b)

    def g_possible(c: int) -> bool:
        if ng[c] == len(gr[c]):
            return False
        b = gr[c][ng[c]][1]
        return done_f[c] >= b and (c == C - 1 or dev[c + 1] != dev[c] or done_g[c + 1] >= b)

    def fkey(c: int) -> tuple[int, int, int]:
        x = fr[c][nf[c]][0] + flag[c]
        return x // G, local[c], x

    def gkey(c: int) -> tuple[int, int, int]:
        y = gr[c][ng[c]][0] + blag[c]
        return y // G, -local[c], y

    def wish(d: int) -> tuple[str, int] | None:
        if wq[d] and pend[d] > KW[d]:
            return "W", wq[d][0]
        chunks = plan.device_chunks[d]
        fs = [c for c in chunks if f_possible(c)]
        gs = [c for c in chunks if g_possible(c)]
        f = min(fs, key=fkey, default=None)
        g = min(gs, key=gkey, default=None)
        if f is not None and (g is None or load[d] + fr[f][nf[f]][1] - fr[f][nf[f]][0]
                              <= K[d]):
            return "F", f
        if g is not None:
            return gkind, g
        if wq[d]:
            return "W", wq[d][0]
        return None

    def take(d: int, kind: str, c: int) -> None:
        if kind == "F":
            a, b = fr[c][nf[c]]
            op = Action(c, "F", nf[c])
            nf[c] += 1
            done_f[c] = b
            load[d] += b - a
        elif kind == "W":
            wq[d].popleft()
            a, b = wr[c][nw[c]]
            op = Action(c, "W", nw[c])
            nw[c] += 1
            pend[d] -= b - a
        else:
            a, b = gr[c][ng[c]]
            op = Action(c, kind, ng[c])
            ng[c] += 1
            done_g[c] = b
            load[d] -= b - a
            if plan.split:
                pend[d] += b - a
                while complete[c] < len(wr[c]) and wr[c][complete[c]][1] <= b:
                    complete[c] += 1
                    wq[d].append(c)
        lists[d].append(op)
        order.append(op)

    def fallback() -> None:
        for c in reversed(range(C)):  # 1. a backward instead: no cap is exceeded
            if ng[c] < len(gr[c]) and g_orderable(c):
                fallbacks.append((len(order), dev[c], "backward"))
                take(dev[c], gkind, c)
                return
        for c in range(C):  # 2. another chunk's forward within its device's cap
            if nf[c] < len(fr[c]) and f_orderable(c) and \
                    load[dev[c]] + fr[c][nf[c]][1] - fr[c][nf[c]][0] <= K[dev[c]]:
                fallbacks.append((len(order), dev[c], "forward"))
                take(dev[c], "F", c)
                return
        for c in range(C):  # 3. the most upstream forward that can be ordered, past its cap
            if nf[c] < len(fr[c]) and f_orderable(c):
                fallbacks.append((len(order), dev[c], "past-cap"))
                take(dev[c], "F", c)
                return
        raise RuntimeError("chunk_order: no operation can be ordered (a bug)")  # pragma: no cover

    remaining = sum(len(fr[c]) + len(gr[c]) + len(wr[c]) for c in range(C))
    sweep = list(range(D)) if visit is None else list(visit)
    if sorted(sweep) != list(range(D)):
        raise ValueError(f"visit must order the devices 0..{D - 1}, got {sweep}")
    while len(order) < remaining:
        moved = False
        for d in sweep:
            while (w := wish(d)) is not None:
                kind, c = w
                if (kind == "F" and not f_orderable(c)) or (kind == gkind and
                                                            not g_orderable(c)):
                    break
                take(d, kind, c)
                moved = True
        if not moved:
            fallback()
    return ChunkSchedule(lists=lists, order=order, fallbacks=fallbacks)


def format_lists(lists: list[list[Action]] | list[list[str]]) -> str:
    """One line per device, e.g. ``device 0: 0F0 0F1 4F0 4I0 4W0``."""
    return "\n".join(f"device {d}: " + " ".join(str(a) for a in row)
                     for d, row in enumerate(lists))
