"""The seven schedules torch 2.13 ships, and the per-rank compute orders torch executes.

``torch.distributed.pipelining`` (torch 2.13) ships two single-stage schedules
(``PipelineScheduleSingle``: one stage per rank) and five multi-stage ones
(``_PipelineScheduleRuntime``: several stages per rank). This module names them, says how
their stages (model chunks) sit on the ranks, says which ``(D, M, v)`` torch refuses (with one
line naming the field), and, in :func:`torch_orders`, asks torch for the compute operations
each rank runs.

Action strings are torch's: ``"3I2"`` is (virtual) stage 3's backward-for-inputs of
microbatch 2 (:func:`umpipe_bench.devsim.parse_action` reads them). The number before the
letter is the stage index, i.e. the model chunk, not the rank;
:func:`umpipe_bench.layout.chunk_devices` maps it to the rank. Letters: ``F`` forward, ``B``
full backward, ``I`` backward for inputs, ``W`` backward for weights (``I`` + ``W`` of a
microbatch replace its ``B``).

Everything here except :func:`torch_orders` and :func:`torch_send_after` is pure: the module
imports no torch; torch is imported inside those two only.
"""

from __future__ import annotations

import types
from dataclasses import dataclass
from functools import lru_cache

from ..devsim import parse_action
from ..errors import InputError, UnknownNameError
from ..layout import device_chunks

__all__ = [
    "TORCH_SCHEDULES",
    "ScheduleNameError",
    "ScheduleShapeError",
    "TorchSchedule",
    "check",
    "schedule_info",
    "torch_orders",
    "torch_send_after",
]


#: a torch schedule name no registry entry knows; the message lists the valid names
ScheduleNameError = UnknownNameError
#: a ``(D, M, v)`` torch would refuse for a schedule
ScheduleShapeError = InputError


@dataclass(frozen=True, slots=True)
class TorchSchedule:
    """One schedule torch ships.

    ``layout``: ``"one"`` (one chunk per rank), ``"loop"`` (``v`` chunks per rank, rank ``d``
    holds ``d, d + D, d + 2D, ...``) or ``"v"`` (two chunks per rank, rank ``d`` holds ``d``
    and ``2D - 1 - d``). ``split_backward``: its orders contain ``I`` and ``W`` operations.
    ``default_v``: chunks per rank when none is given.
    """

    name: str
    torch_class: str
    layout: str
    split_backward: bool
    default_v: int

    @property
    def single(self) -> bool:
        """Whether torch builds it from one stage object (``PipelineScheduleSingle``)."""
        return self.layout == "one"


TORCH_SCHEDULES: dict[str, TorchSchedule] = {
    s.name: s
    for s in (
        TorchSchedule("gpipe", "ScheduleGPipe", "one", False, 1),
        TorchSchedule("1f1b", "Schedule1F1B", "one", False, 1),
        TorchSchedule("interleaved-1f1b", "ScheduleInterleaved1F1B", "loop", False, 2),
        TorchSchedule("looped-bfs", "ScheduleLoopedBFS", "loop", False, 2),
        TorchSchedule("zb1p", "ScheduleInterleavedZeroBubble", "loop", True, 2),
        TorchSchedule("zbv", "ScheduleZBVZeroBubble", "v", True, 2),
        TorchSchedule("dualpipev", "ScheduleDualPipeV", "v", True, 2),
    )
}


def _lookup_keys() -> dict[str, str]:
    keys: dict[str, str] = {}
    for s in TORCH_SCHEDULES.values():
        keys[s.name] = s.name
        keys[s.torch_class.lower()] = s.name
        keys[s.torch_class.lower().removeprefix("schedule")] = s.name  # torch's own short names
    return keys


_KEYS = _lookup_keys()


def schedule_info(name: str) -> TorchSchedule:
    """The schedule called ``name``, case-insensitive: our name (``zb1p``), the torch class
    (``ScheduleInterleavedZeroBubble``) or torch's ``get_schedule_class`` name
    (``InterleavedZeroBubble``)."""
    key = _KEYS.get(str(name).lower())
    if key is None:
        valid = ", ".join(f"{s.name} ({s.torch_class})" for s in TORCH_SCHEDULES.values())
        raise ScheduleNameError(f"unknown torch schedule {name!r}; valid names: {valid}")
    return TORCH_SCHEDULES[key]


def check(name: str, D: int, M: int, v: int | None = None) -> int:
    """Raise :class:`ScheduleShapeError` (one line naming the field) when torch 2.13 would
    refuse schedule ``name`` on ``D`` ranks, ``M`` microbatches, ``v`` chunks per rank;
    return the ``v`` used (``default_v`` when ``v`` is None).

    torch's rules (``torch/distributed/pipelining/schedules.py``, confirmed by constructing
    every class for ``D <= 8``, ``v <= 4``, ``M <= 16``):

    * ``gpipe``: any ``M``; ``1f1b``: ``M >= D`` (one stage per rank, so ``D`` stages);
    * ``interleaved-1f1b``, ``zb1p``: with ``rounds = max(1, M // D)``, ``M`` a multiple of
      ``rounds``; any ``v >= 1`` (``v = 1`` runs too);
    * ``looped-bfs``: any ``M``, any ``v >= 1``;
    * ``zbv``: exactly two chunks per rank, any ``M``;
    * ``dualpipev``: exactly two chunks per rank and ``M >= 2D`` (the number of stages).

    ``D >= 1`` and ``M >= 1`` are asked of every schedule.
    """
    info = schedule_info(name)
    for field, value in (("D", D), ("M", M)):
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise ScheduleShapeError(f"{field} must be an integer >= 1, got {value!r}")
    if v is None:
        v = info.default_v
    if isinstance(v, bool) or not isinstance(v, int) or v < 1:
        raise ScheduleShapeError(f"v must be an integer >= 1, got {v!r}")
    cls = info.torch_class
    if info.layout == "one" and v != 1:
        raise ScheduleShapeError(f"v: {cls} runs one stage per rank (v = 1), got v = {v}")
    if info.layout == "v" and v != 2:
        raise ScheduleShapeError(f"v: {cls} needs exactly two stages per rank (v = 2), "
                                 f"got v = {v}")
    if info.name == "1f1b" and M < D:
        raise ScheduleShapeError(f"M: {cls} needs M >= D = {D} microbatches, got M = {M}")
    if info.name == "dualpipev" and M < 2 * D:
        raise ScheduleShapeError(f"M: {cls} needs M >= 2D = {2 * D} microbatches (one per "
                                 f"stage), got M = {M}")
    if info.name in ("interleaved-1f1b", "zb1p"):
        rounds = max(1, M // D)
        if M % rounds:
            raise ScheduleShapeError(
                f"M: {cls} needs M to be a multiple of its rounds max(1, M // D) = {rounds} "
                f"with D = {D}, got M = {M}")
    return v


# ----------------------------------------------------------------------------------- torch part
def _stub_stage(index: int, n: int, D: int, rank: int) -> types.SimpleNamespace:
    """The attributes a schedule constructor reads from a stage (no module, no process group)."""
    return types.SimpleNamespace(stage_index=index, num_stages=n, group_size=D, group_rank=rank,
                                 is_first=index == 0, is_last=index == n - 1, submod=None)


def _single_orders(cls: type, D: int, M: int) -> list[list[str]]:
    """Run ``cls._step_microbatches`` once per rank with a stage that only records the
    ``forward_one_chunk`` / ``backward_one_chunk`` calls it receives (no tensors, no comms)."""
    out = []
    for rank in range(D):
        log: list[str] = []
        stage = _stub_stage(rank, D, D, rank)

        def fwd(i, *a, _r=rank, _log=log, **k):
            _log.append(f"{_r}F{i}")

        def bwd(i, *a, _r=rank, _log=log, full_backward=True, **k):
            _log.append(f"{_r}{'B' if full_backward else 'I'}{i}")

        def nothing(*a, **k):
            return []

        stage.forward_one_chunk, stage.backward_one_chunk = fwd, bwd
        stage.get_fwd_recv_ops = stage.get_fwd_send_ops = nothing
        stage.get_bwd_recv_ops = stage.get_bwd_send_ops = nothing
        stage.perform_reduce_grad = nothing
        sched = cls(stage, M, loss_fn=nothing)
        for attr in ("_initialize_stage", "_maybe_compute_loss", "_maybe_get_loss",
                     "_update_losses"):
            setattr(sched, attr, nothing)
        sched._check_inputs = lambda *a, **k: ([None] * M, [{}] * M)
        sched._step_microbatches([None] * M, [{}] * M, None, None)
        out.append(log)
    return out


def _runtime_orders(cls: type, layout: str, D: int, M: int,
                    v: int) -> tuple[list[list[str]], list[list[int]]]:
    """Build the schedule once (rank 0's stages) and read every rank's lowered program: its
    compute actions, and for each the position of the last compute action the runtime has run
    when it reaches that action's ``SEND_F`` / ``SEND_B`` (the action itself when it sends
    nothing)."""
    from torch.distributed.pipelining.schedules import (
        OVERLAP_F_B,
        SEND_B,
        SEND_F,
    )

    n = D * v
    stages = [_stub_stage(c, n, D, 0) for c in device_chunks(layout, D, v)[0]]
    sched = cls(stages, M)
    out, sends = [], []
    for rank in range(D):
        row: list[str] = []
        at: list[int] = []
        where: dict[tuple[int, str, int], int] = {}
        for action in sched.pipeline_order_with_comms[rank]:
            kind = action.computation_type
            if kind in (SEND_F, SEND_B):
                letters = "F" if kind == SEND_F else "BI"
                for x in letters:
                    i = where.get((action.stage_index, x, action.microbatch_index))
                    if i is not None:
                        at[i] = len(row) - 1
                continue
            parts = action.sub_actions if kind == OVERLAP_F_B else (action,)
            for a in parts:
                if a.is_compute_op:
                    where[(a.stage_index, parse_action(str(a)).kind,
                           a.microbatch_index)] = len(row)
                    at.append(len(row))
                    row.append(str(a))
        out.append(row)
        sends.append(at)
    return out, sends


@lru_cache(maxsize=512)
def _torch_program(name: str, D: int, M: int, v: int) -> tuple[
        tuple[tuple[str, ...], ...], tuple[tuple[int, ...], ...] | None]:
    import torch.distributed.pipelining.schedules as ts

    info = TORCH_SCHEDULES[name]
    cls = getattr(ts, info.torch_class)
    if info.single:
        rows, sends = _single_orders(cls, D, M), None
    else:
        rows, at = _runtime_orders(cls, info.layout, D, M, v)
        held = any(k != i for r in at for i, k in enumerate(r))
        sends = tuple(tuple(r) for r in at) if held else None
    return tuple(tuple(r) for r in rows), sends


def _torch_orders(name: str, D: int, M: int, v: int) -> tuple[tuple[str, ...], ...]:
    return _torch_program(name, D, M, v)[0]


def torch_send_after(name: str, D: int, M: int,
                     v: int | None = None) -> list[list[int]] | None:
    """Per rank and compute action of :func:`torch_orders`, the position of the compute action
    at whose end the runtime sends that action's output to another rank; None where every
    action's output leaves at its own end (every schedule but ``dualpipev`` in torch 2.13).

    Read from ``pipeline_order_with_comms``: an action's ``SEND_F`` / ``SEND_B`` runs after
    the compute actions before it in the rank's program. ``ScheduleDualPipeV`` runs pairs
    ``OVERLAP_F_B`` (a forward, then a full backward of another chunk) and places both sends
    after the pair, so the forward's output waits for the backward to end. The single-stage
    schedules send at once (None).
    """
    info = schedule_info(name)
    v = check(info.name, D, M, v)
    sends = _torch_program(info.name, D, M, v)[1]
    return None if sends is None else [list(r) for r in sends]


def torch_orders(name: str, D: int, M: int, v: int | None = None) -> list[list[str]]:
    """Per rank, the compute operations torch 2.13 executes for schedule ``name``, in order.

    How, per kind of schedule (torch is imported here, lazily; results are cached):

    * ``PipelineScheduleSingle`` (``gpipe``, ``1f1b``): the order is not read from
      ``pipeline_order`` (for ``Schedule1F1B`` that IR lists the last rank's forwards as
      ``1..M``, not what runs). Instead the schedule's own ``_step_microbatches`` is run once
      per rank with a stand-in stage that records each ``forward_one_chunk(i)`` as ``"rFi"``
      and each ``backward_one_chunk(i)`` as ``"rBi"``; its p2p ops are empty lists and the
      input/loss helpers do nothing.
    * ``_PipelineScheduleRuntime`` (the five others): the schedule is constructed once with
      stand-in stages for rank 0, and for every rank ``pipeline_order_with_comms[rank]`` (the
      list ``_step_microbatches`` iterates over for that rank) is read, keeping the compute
      actions (``F``, ``B``, ``I``, ``W``; dropping ``SEND_*``, ``RECV_*``, ``UNSHARD``,
      ``RESHARD``, ``REDUCE_GRAD``), with each ``OVERLAP_F_B`` replaced by its
      ``sub_actions`` in order (the runtime performs them one after the other).

    ``check`` is applied first: a refused ``(D, M, v)`` raises :class:`ScheduleShapeError`.
    """
    info = schedule_info(name)
    v = check(info.name, D, M, v)
    return [list(r) for r in _torch_orders(info.name, D, M, v)]
