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
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import torch
from torch.autograd.graph import GradientEdge, Node

__all__ = ["Cut", "WeightWork", "cut_groups", "first_chunk_work", "input_grad", "weight_grad"]

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
        reached = [c for c in group if c.grads is not None]
        if not reached:
            continue  # no gradient arrived at these cuts: their parameters get none from here
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
            got = torch.autograd.grad(roots, params, grads, retain_graph=True,
                                      allow_unused=True)
        finally:
            for h in handles:
                h.remove()
        for p, g in zip(params, got):
            _accumulate(p, g)
