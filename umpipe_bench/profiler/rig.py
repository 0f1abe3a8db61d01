"""Stage rigs: one stage of a model ready to be timed, and its forward and backward on a range
of samples (docs/MODEL.md §1). The engine (:mod:`.engine`) and the backward locality cell
(:mod:`.locality`) both time these passes.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from ..errors import ProfileError

__all__ = ["StageRig", "prepare_rigs", "stage_backward", "stage_forward"]


@dataclass
class StageRig:
    """One stage ready to be timed: its layers, its input at the largest size, the gradient
    that would arrive from the next stage (None on the last stage) or the targets (last stage
    only), and an optimizer over its parameters (None when it has none)."""

    index: int
    layers: tuple[int, int]  # [first, last) model layer indices
    module: nn.Module
    inputs: torch.Tensor
    needs_input_grad: bool
    grad_out: torch.Tensor | None
    targets: torch.Tensor | None
    optimizer: torch.optim.Optimizer | None
    loss_scale: float = 1.0


def _make_optimizer(params: list[nn.Parameter], name: str) -> torch.optim.Optimizer | None:
    if not params:
        return None
    if name == "adam":
        return torch.optim.Adam(params, lr=1e-6)
    if name == "sgd":
        return torch.optim.SGD(params, lr=1e-6, momentum=0.9)
    raise ProfileError(f"unknown optimizer {name!r}; valid optimizers: adam, sgd")


def prepare_rigs(
    layers: Sequence[nn.Module],
    layers_per_stage: Sequence[int],
    inputs: torch.Tensor,
    targets: torch.Tensor,
    *,
    optimizer: str,
    seed: int,
) -> list[StageRig]:
    """Group ``layers`` into stages and capture each stage's real input (one forward of the
    whole batch without autograd), plus a seeded random output gradient for inner stages."""
    B = int(inputs.shape[0])
    rigs: list[StageRig] = []
    gen = torch.Generator().manual_seed(seed + 1)
    h = inputs
    first = 0
    S = len(layers_per_stage)
    for s, k in enumerate(layers_per_stage):
        module = nn.Sequential(*layers[first : first + k])
        stage_in = h.detach()
        with torch.no_grad():
            h = module(stage_in)
        last = s == S - 1
        grad_out = None
        if not last:
            grad_out = torch.randn(h.shape, generator=gen, dtype=torch.float64)
            grad_out = (grad_out / math.sqrt(h[0].numel())).to(h.dtype).to(h.device)
        rigs.append(
            StageRig(
                index=s,
                layers=(first, first + k),
                module=module,
                inputs=stage_in,
                needs_input_grad=s > 0 and stage_in.is_floating_point(),
                grad_out=grad_out,
                targets=targets if last else None,
                optimizer=_make_optimizer(list(module.parameters()), optimizer),
                loss_scale=1.0 / B,
            )
        )
        first += k
    return rigs


def stage_forward(
    rig: StageRig, m: int, loss_fn: Callable[[Any, Any], torch.Tensor], start: int = 0
) -> tuple[torch.Tensor, torch.Tensor]:
    """The stage's forward with autograd on samples ``[start, start + m)`` of its input
    (the last stage: + loss / B); returns the input and the output."""
    x = rig.inputs[start:start + m]
    if rig.needs_input_grad:
        x = x.detach().requires_grad_(True)
    out = rig.module(x)
    if rig.targets is not None:
        out = loss_fn(out, rig.targets[start:start + m]) * rig.loss_scale
    return x, out


def stage_backward(rig: StageRig, out: torch.Tensor, m: int, start: int = 0) -> None:
    """The backward of :func:`stage_forward`'s output, from the output gradient of samples
    ``[start, start + m)`` (the last stage: from the loss)."""
    if rig.grad_out is None:
        out.backward()
    else:
        out.backward(rig.grad_out[start:start + m])
