"""The split backward of one chunk's microbatch in the runtime: ``I`` (the gradient w.r.t. the
chunk input) and ``W`` (the gradients w.r.t. its parameters), with plain autograd
(docs/MODEL.md §1c; docs/EXECUTE.md, "I and W").

Why a split needs more than two ``autograd.grad`` calls: asking autograd for the input
gradient alone and later for the parameter gradients alone would run the input-gradient path
twice (a full backward's cost in ``W``). Instead the graph is cut where parameter gradients
branch off the input-gradient path:

* the **input path** is every node from which the chunk input's ``AccumulateGrad`` can be
  reached;
* a **cut** is a node on the input path with children that cannot reach the input but do reach
  parameters (a Linear's ``addmm``, a LayerNorm's or a convolution's backward): the gradient
  that arrives at it during ``I`` is all ``W`` needs to finish the parameters below it.

:func:`input_grad` runs ``I`` (``autograd.grad`` to the input, graph retained) with a
pre-hook on every cut that keeps the gradient arriving there. :func:`weight_grad` runs ``W``:
per group of cuts, one ``autograd.grad`` from the kept gradients (``GradientEdge`` roots) to
the group's parameters, accumulated into ``.grad``. Cuts whose branches share a parameter form
one group; the engine then walks the input path between them again, and a pre-hook on each
cut of the group puts back its kept gradient so nothing counts twice.

What ``W`` keeps alive between the two: the kept gradients and, through the cut nodes, every
saved tensor below the topmost cut (the input path below a cut stays referenced). Saved
tensors only the output reaches are freed when the caller drops the output after ``I``. The
graph itself is freed when the :class:`WeightWork` is dropped after ``W`` (every ``W`` call
retains the graph, because a later group's walk may pass through nodes an earlier one ran).

The first chunk's input needs no gradient: its ``I`` computes nothing and keeps the output
and its gradient, and its ``W`` is the whole backward to the parameters
(:func:`first_chunk_work`), as torch's first pipeline stage does.

**One ``W`` over several ``I`` microbatches** (:func:`weight_grad_many`). A weight gradient is
a sum over samples, so a ``W`` covering microbatches ``q_1 .. q_k`` can run as one call over
their ``q_1 + .. + q_k`` samples instead of ``k`` calls. Each microbatch has its own graph, so
autograd cannot do that; :func:`weight_grad_many` does it at every cut of a kind whose weight
gradient is one kernel over the samples it saved: a Linear's ``addmm``/``mm`` (the kept output
gradients and the saved inputs, concatenated, give ``dW = G^T X`` as one product), a
convolution (one ``convolution_backward`` over the concatenated inputs and gradients) and a
LayerNorm (one ``native_layer_norm_backward``). A cut of another kind, a group of several cuts
(shared parameters), or graphs that differ between the microbatches run per microbatch as
:func:`weight_grad` does; so does the first chunk, whose ``W`` is each microbatch's whole
backward. The model charges the same (docs/MODEL.md §1c).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import GradientEdge, Node

__all__ = ["Cut", "WeightWork", "cut_groups", "first_chunk_work", "input_grad", "weight_grad",
           "weight_grad_many"]

Grads = tuple[torch.Tensor | None, ...]


@dataclass
class Cut:
    """A node on the input path with parameter branches: the parameters below them and the
    gradient that reached the node during ``I``."""

    node: Node
    params: list[torch.nn.Parameter]
    grads: Grads | None = None


@dataclass
class WeightWork:
    """What one microbatch keeps from its ``I`` for its ``W``."""

    #: groups of cuts (a group's branches share parameters)
    groups: list[list[Cut]] = field(default_factory=list)
    #: first chunk: the output and its gradient; ``W`` is then the whole backward
    full: tuple[torch.Tensor, torch.Tensor | None] | None = None
    params: list[torch.nn.Parameter] = field(default_factory=list)


def _nodes_children_first(root: Node) -> list[Node]:
    """Every node reachable from ``root``, each after all nodes it reaches (iterative DFS)."""
    out: list[Node] = []
    seen = {root}
    stack: list[tuple[Node, int]] = [(root, 0)]
    while stack:
        node, i = stack[-1]
        nxt = node.next_functions
        if i == len(nxt):
            stack.pop()
            out.append(node)
            continue
        stack[-1] = (node, i + 1)
        child = nxt[i][0]
        if child is not None and child not in seen:
            seen.add(child)
            stack.append((child, 0))
    return out


def cut_groups(root: Node, x: torch.Tensor, params: Sequence[torch.nn.Parameter]
               ) -> list[list[Cut]]:
    """The cuts of the graph under ``root`` (module docstring), grouped by shared parameters."""
    by_id = {id(p): p for p in params}
    to_input: dict[Node, bool] = {}
    below: dict[Node, frozenset[int]] = {}  # ids of the parameters a node reaches
    for node in _nodes_children_first(root):
        leaf = getattr(node, "variable", None)
        if leaf is not None:
            to_input[node] = leaf is x
            below[node] = frozenset((id(leaf),)) if id(leaf) in by_id else frozenset()
            continue
        kids = [k for k, _ in node.next_functions if k is not None]
        to_input[node] = any(to_input[k] for k in kids)
        below[node] = frozenset().union(*(below[k] for k in kids))
    found: list[tuple[Node, frozenset[int]]] = []
    for node, on_path in to_input.items():
        if not on_path:
            continue
        branch = frozenset().union(*(below[k] for k, _ in node.next_functions
                                     if k is not None and not to_input[k]))
        if branch:
            found.append((node, branch))
    # cuts sharing a parameter join one group: label each cut by the first cut owning any of
    # its parameters, merging labels transitively
    label = list(range(len(found)))

    def root_of(i: int) -> int:
        while label[i] != i:
            label[i] = label[label[i]]
            i = label[i]
        return i

    owner: dict[int, int] = {}
    for i, (_, branch) in enumerate(found):
        for pid in branch:
            label[root_of(i)] = root_of(owner.setdefault(pid, i))
    groups: dict[int, list[Cut]] = {}
    for i, (node, branch) in enumerate(found):
        groups.setdefault(root_of(i), []).append(Cut(node, [by_id[k] for k in sorted(branch)]))
    return list(groups.values())


def input_grad(y: torch.Tensor, x: torch.Tensor, grad_y: torch.Tensor | None,
               params: Sequence[torch.nn.Parameter]) -> tuple[torch.Tensor, WeightWork]:
    """``I``: the gradient of ``y`` (with output gradient ``grad_y``; None for a scalar loss)
    w.r.t. the leaf ``x``, and what ``W`` needs. The caller drops ``y`` afterwards."""
    params = [p for p in params if p.requires_grad]
    if y.grad_fn is None:
        return torch.zeros_like(x), WeightWork(params=params)
    groups = cut_groups(y.grad_fn, x, params)

    def keeper(cut: Cut) -> Callable[[Grads], None]:
        def hook(grads: Grads) -> None:
            cut.grads = tuple(grads)
        return hook

    handles = [cut.node.register_prehook(keeper(cut)) for g in groups for cut in g]
    try:
        (dx,) = torch.autograd.grad(y, (x,), grad_y, retain_graph=True, allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    return (torch.zeros_like(x) if dx is None else dx), WeightWork(groups=groups, params=params)


def first_chunk_work(y: torch.Tensor, grad_y: torch.Tensor | None,
                     params: Sequence[torch.nn.Parameter]) -> WeightWork:
    """``I`` of the first chunk: nothing to compute; ``W`` will run the whole backward."""
    return WeightWork(full=(y, grad_y), params=[p for p in params if p.requires_grad])


def _accumulate(p: torch.nn.Parameter, g: torch.Tensor | None) -> None:
    if g is None:
        return
    if p.grad is None:
        p.grad = g
    else:
        p.grad.add_(g)


def group_grad(group: list[Cut], retain_graph: bool = True) -> None:
    """The parameter gradients below one group of cuts of one microbatch, from their kept
    gradients, accumulated into ``.grad`` (module docstring); ``retain_graph=False`` frees
    the graph below (the profiler's W, which runs each group once)."""
    reached = [c for c in group if c.grads is not None]
    if not reached:
        return  # no gradient arrived at these cuts: their parameters get none from here
    roots, grads = [], []
    for c in reached:
        for i, g in enumerate(c.grads or ()):
            if g is not None:
                roots.append(GradientEdge(c.node, i))
                grads.append(g)
    params = list({id(p): p for c in reached for p in c.params}.values())
    handles = []
    if len(reached) > 1:  # walks between the cuts must not add to their kept gradients
        handles = [c.node.register_prehook(lambda _g, kept=c.grads: kept) for c in reached]
    try:
        got = torch.autograd.grad(roots, params, grads, retain_graph=retain_graph,
                                  allow_unused=True)
    finally:
        for h in handles:
            h.remove()
    for p, g in zip(params, got):
        _accumulate(p, g)


def weight_grad(work: WeightWork) -> None:
    """``W``: the parameter gradients of one microbatch, accumulated into ``.grad``; the
    microbatch's graph is released (module docstring)."""
    if work.full is not None:
        y, grad_y = work.full
        work.full = None
        if work.params and y.grad_fn is not None:
            torch.autograd.backward(y, grad_y, inputs=work.params)
        return
    groups, work.groups = work.groups, []
    for group in groups:
        group_grad(group)


def _leaf_param(node: Node | None) -> torch.Tensor | None:
    """The leaf an ``AccumulateGrad`` node accumulates into (None for anything else)."""
    return None if node is None else getattr(node, "variable", None)


def _weight_through_t(node: Node | None) -> torch.Tensor | None:
    """The leaf under ``TBackward0 -> AccumulateGrad`` (a Linear's ``weight.t()``)."""
    if node is None or type(node).__name__ != "TBackward0" or len(node.next_functions) != 1:
        return None
    return _leaf_param(node.next_functions[0][0])


#: per cut kind: (where its weight, bias sit among the node's inputs, the saved input's name)
_KINDS = {
    "AddmmBackward0": (2, 0, "_saved_mat1"),
    "MmBackward0": (1, None, "_saved_self"),
    "ConvolutionBackward0": (1, 2, "_saved_input"),
    "NativeLayerNormBackward0": (1, 2, "_saved_input"),
}


def _slots(cut: Cut) -> tuple[torch.Tensor | None, torch.Tensor | None] | None:
    """``(weight, bias)`` of a cut whose weight gradient :func:`weight_grad_many` computes
    over several microbatches in one call, or None (another kind, or a structure other than
    the kind's own: a parameter behind a view, a weight that is not a leaf)."""
    name = type(cut.node).__name__
    kind = _KINDS.get(name)
    if kind is None:
        return None
    if name == "AddmmBackward0" and (cut.node._saved_alpha != 1 or cut.node._saved_beta != 1):
        return None
    wi, bi, _ = kind
    nxt = [k for k, _ in cut.node.next_functions]
    w = _weight_through_t(nxt[wi]) if name in ("AddmmBackward0", "MmBackward0") \
        else _leaf_param(nxt[wi])
    b = _leaf_param(nxt[bi]) if bi is not None else None
    if (nxt[wi] is not None and w is None) or (bi is not None and nxt[bi] is not None
                                                and b is None):
        return None  # a weight or bias behind some other node
    got = {id(t) for t in (w, b) if t is not None}
    if not got or got != {id(p) for p in cut.params}:
        return None
    return w, b


def _batched_grads(cuts: Sequence[Cut], want_w: bool, want_b: bool
                   ) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """The weight and bias gradients below the same batchable cut of several microbatches,
    one kernel call over their concatenated samples."""
    node = cuts[0].node
    name = type(node).__name__
    g = torch.cat([c.grads[0] for c in cuts])  # type: ignore[index]
    x = torch.cat([getattr(c.node, _KINDS[name][2]) for c in cuts])
    if name in ("AddmmBackward0", "MmBackward0"):
        return (g.t().mm(x) if want_w else None), (g.sum(0) if want_b else None)
    if name == "ConvolutionBackward0":
        _, gw, gb = torch.ops.aten.convolution_backward(
            g, x, node._saved_weight, node._saved_bias_sym_sizes_opt, node._saved_stride,
            node._saved_padding, node._saved_dilation, node._saved_transposed,
            node._saved_output_padding, node._saved_groups, [False, want_w, want_b])
        return gw, gb
    mean = torch.cat([c.node._saved_result1 for c in cuts])  # NativeLayerNormBackward0
    rstd = torch.cat([c.node._saved_result2 for c in cuts])
    _, gw, gb = torch.ops.aten.native_layer_norm_backward(
        g, x, node._saved_normalized_shape, mean, rstd, node._saved_weight, node._saved_bias,
        [False, want_w, want_b])
    return gw, gb


def _batched_cut(cuts: Sequence[Cut]) -> bool:
    """The weight gradients below the same cut of several microbatches as one kernel call
    over their concatenated samples; False (nothing done) where that does not apply."""
    slots = [_slots(c) for c in cuts]
    if any(s is None or c.grads is None or len(c.grads) != 1 or c.grads[0] is None
           for s, c in zip(slots, cuts)):
        return False
    w, b = slots[0]  # type: ignore[misc]
    if any(s[0] is not w or s[1] is not b for s in slots):  # type: ignore[index]
        return False
    with torch.no_grad():  # saved inputs may require grad; the gradients must not
        gw, gb = _batched_grads(cuts, w is not None, b is not None)
    if w is not None:
        _accumulate(w, gw)  # type: ignore[arg-type]
    if b is not None:
        _accumulate(b, gb)  # type: ignore[arg-type]
    return True


def _same_graphs(works: Sequence[WeightWork]) -> bool:
    """Whether the microbatches' cut groups correspond one to one (same kinds, same
    parameters), so the group at one index is the same cut in every microbatch."""
    first = works[0].groups
    for w in works[1:]:
        if len(w.groups) != len(first):
            return False
        for g0, g in zip(first, w.groups):
            if len(g0) != len(g) or any(
                    type(a.node) is not type(b.node) or [id(p) for p in a.params]
                    != [id(p) for p in b.params] for a, b in zip(g0, g)):
                return False
    return True


def weight_grad_many(works: Sequence[WeightWork]) -> None:
    """One ``W`` over several ``I`` microbatches (in sample order): at every batchable cut one
    kernel call over all their samples, elsewhere per microbatch (module docstring); the
    gradients are those of ``weight_grad`` on each, and every graph is released."""
    if len(works) == 1 or any(w.full is not None for w in works) or not _same_graphs(works):
        for w in works:
            weight_grad(w)
        return
    columns = list(zip(*(w.groups for w in works)))
    for w in works:
        w.groups = []
    for column in columns:
        if len(column[0]) == 1 and _batched_cut([g[0] for g in column]):
            continue
        for group in column:
            group_grad(group)
