"""Split backward (docs/MODEL.md §1c): the input-gradient pass I and the weight-gradient pass W
of one stage, timed by the engine (:mod:`.engine`), and the bytes a microbatch holds between
them.

Zero-bubble schedules (Qi et al., ICLR 2024; torch's ``ScheduleInterleavedZeroBubble``,
``ScheduleZBVZeroBubble``, ``ScheduleDualPipeV``) run a stage's backward as two passes:

* **I** (:func:`backward_input`): ``torch.autograd.grad`` of the stage output (last stage: the
  loss) w.r.t. the stage input, graph retained. Before it, the autograd graph is split at its
  *frontier*: the nodes on a path to the stage input that also have a child leading only to
  parameters (a Linear's ``addmm``, a LayerNorm's or a convolution's backward node). A pre-hook
  on each frontier node keeps the gradient that arrives there during I (the frontier is the
  runtime's cuts, :func:`umpipe_bench.runtime.split_backward.cut_groups`).
* **W** (:func:`backward_weight`): ``torch.autograd.grad`` from each frontier node
  (``GradientEdge``) with its kept gradient down to the parameters below it; it re-runs only
  the frontier node and its parameter-only children, never the input-gradient path again
  (except between nodes that share a parameter, see :func:`backward_weight`). Results are
  accumulated into ``p.grad`` (as a full backward does).

A stage whose input needs no gradient (stage 0) has nothing to compute in I; as torch's
``PipelineStage.backward_weight_one_chunk`` does for the first stage, its W is the whole
backward (``torch.autograd.backward`` with the parameters as ``inputs``, accumulating into
``.grad`` in place).

Between I and W the microbatch holds the saved tensors of every node still reachable from a
frontier node (the output side of the graph is dropped after I), plus the kept gradients;
:func:`measure_split_memory` counts both, and separately the saved tensors W actually reads.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import torch

from ..runtime.split_backward import Cut as _Frontier
from ..runtime.split_backward import cut_groups as _frontier
from ..runtime.split_backward import group_grad
from .rig import StageRig, stage_forward

__all__ = [
    "SplitMemoryFigures",
    "SplitState",
    "backward_input",
    "backward_weight",
    "measure_split_memory",
]


@dataclass
class SplitState:
    """What a microbatch keeps from its I pass for its W pass."""

    #: frontier nodes in groups: nodes that share a parameter form one group
    groups: list[list[_Frontier]] = field(default_factory=list)
    #: stage 0 (input needs no gradient): W is the whole backward of these
    full: tuple[torch.Tensor, torch.Tensor | None] | None = None
    params: list[torch.nn.Parameter] = field(default_factory=list)


def backward_input(rig: StageRig, x: torch.Tensor, out: torch.Tensor, m: int,
                   start: int = 0) -> SplitState:
    """The I pass of :func:`.rig.stage_forward`'s output: the stage-input gradient into
    ``x.grad``, the frontier gradients kept for :func:`backward_weight`. The caller drops
    ``out`` afterwards (the output side of the graph is then freed)."""
    params = [p for p in rig.module.parameters() if p.requires_grad]
    grad = None if rig.grad_out is None else rig.grad_out[start:start + m]
    if not (rig.needs_input_grad and x.requires_grad):
        return SplitState(full=(out, grad), params=params)
    groups = _frontier(out.grad_fn, x, params) if out.grad_fn is not None else []
    handles = []

    def keeper(f: _Frontier) -> Callable[[tuple[torch.Tensor | None, ...]], None]:
        def hook(grads: tuple[torch.Tensor | None, ...]) -> None:
            f.grads = tuple(grads)
        return hook

    try:
        for group in groups:
            for f in group:
                handles.append(f.node.register_prehook(keeper(f)))
        (dx,) = torch.autograd.grad(out, (x,), grad, retain_graph=True)
    finally:
        for h in handles:
            h.remove()
    x.grad = dx
    return SplitState(groups=groups, params=params)


def backward_weight(state: SplitState) -> None:
    """The W pass: parameter gradients accumulated into ``p.grad``; the graph is freed.

    One ``torch.autograd.grad`` per group of frontier nodes, from the nodes' kept gradients
    to the group's parameters (the runtime's :func:`~umpipe_bench.runtime.split_backward.
    group_grad`, here freeing the graph). A one-node group runs only that node and its
    parameter-only children. In a group sharing a parameter the paths between its nodes lead
    to the shared parameter too, so the engine runs them again; a pre-hook on each node of the
    group puts back its kept gradient (else gradients arriving from the group's upper nodes
    would count twice). That re-run is W's price for shared weights (torch's
    ``stage_backward_weight`` merges such parameter groups the same way)."""
    if state.full is not None:
        out, grad = state.full
        state.full = None
        if state.params:  # accumulated in place, as torch's first stage does
            torch.autograd.backward(out, grad, inputs=state.params)
        return
    groups, state.groups = state.groups, []
    for group in groups:
        group_grad(group, retain_graph=False)


@dataclass(frozen=True)
class SplitMemoryFigures:
    """Bytes per sample (docs/MODEL.md §1c) at one size, parameters and the stage input left
    out as in ``saved_act_bytes_per_sample``: the saved activations still referenced after I
    plus the kept frontier gradients (``held``), its two parts, and the saved activations W
    reads (``w_reads``, a lower bound of what any implementation must hold)."""

    held: float
    held_saved: float
    held_grads: float
    w_reads: float
    saved: float


class _Box:
    """A saved tensor as autograd stores it under the counting hooks (weak-referenceable).
    It keeps a detached alias (same storage): a node's saved *output* kept with its
    ``grad_fn`` would make a reference cycle node -> box -> tensor -> node that outlives I."""

    __slots__ = ("__weakref__", "t")

    def __init__(self, t: torch.Tensor) -> None:
        self.t = t.detach()


def _storage_bytes(tensors: Any, skip: set[int]) -> int:
    seen: dict[int, int] = {}
    for t in tensors:
        st = t.untyped_storage()
        if st.data_ptr() not in skip:
            seen[st.data_ptr()] = st.nbytes()
    return sum(seen.values())


def measure_split_memory(rig: StageRig, m: int,
                         loss_fn: Callable[[Any, Any], torch.Tensor]) -> SplitMemoryFigures:
    """Count, for one forward of ``m`` samples followed by :func:`backward_input`, which saved
    tensors autograd still holds (each saved tensor is boxed by ``saved_tensors_hooks``; a box
    alive after I, with the output dropped and garbage collected, is held) and which ones
    :func:`backward_weight` unpacks. Distinct storages, per sample."""
    skip = {p.untyped_storage().data_ptr() for p in rig.module.parameters()}
    skip.add(rig.inputs.untyped_storage().data_ptr())
    boxes: list[weakref.ref[_Box]] = []
    read: dict[int, torch.Tensor] = {}

    def pack(t: torch.Tensor) -> _Box:
        b = _Box(t)
        boxes.append(weakref.ref(b))
        return b

    def unpack(b: _Box) -> torch.Tensor:
        if reading:
            read[id(b)] = b.t
        return b.t.detach()  # a fresh alias: autograd may attach a grad_fn to what it gets

    reading = False
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        x, out = stage_forward(rig, m, loss_fn)
        saved = _storage_bytes((r().t for r in boxes if r() is not None), skip)
        state = backward_input(rig, x, out, m)
        del out
        gc.collect()
        alive = [r() for r in boxes]
        held_saved = _storage_bytes((b.t for b in alive if b is not None), skip)
        del alive
        kept = [g for grp in state.groups for f in grp for g in (f.grads or ()) if g is not None]
        held_grads = _storage_bytes(kept, skip)
        del kept
        reading = True
        backward_weight(state)
        reading = False
    w_reads = _storage_bytes(read.values(), skip)
    del state
    read.clear()
    rig.module.zero_grad(set_to_none=False)
    return SplitMemoryFigures(held=(held_saved + held_grads) / m, held_saved=held_saved / m,
                              held_grads=held_grads / m, w_reads=w_reads / m, saved=saved / m)
