"""``tiny-mlp``: a few Linear+tanh layers for float64 runtime correctness tests (docs/MODEL.md §5).

The model is per-sample independent (no normalisation across the batch, no dropout), so the
gradient of ``sum of per-sample losses / B`` does not depend on how the batch is cut into
microbatches: any plan must reproduce the single-process full-batch gradient exactly up to
floating-point summation order.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from umpipe_bench.errors import UserInputError
from umpipe_bench.problems.models import ModelSpec

__all__ = ["MODELS", "build", "loss", "sample_batch"]

DEFAULT_CONFIG: dict[str, Any] = {"d_in": 8, "hidden": 16, "d_out": 4, "layers": 6}


def _cfg(config: dict[str, Any] | None) -> dict[str, Any]:
    merged = dict(DEFAULT_CONFIG)
    merged.update(config or {})
    if int(merged["layers"]) < 2:
        raise UserInputError(f"tiny-mlp: config 'layers' must be >= 2, got {merged['layers']}")
    return merged


def build(
    config: dict[str, Any] | None, dtype: torch.dtype = torch.float64, seed: int = 0
) -> list[nn.Module]:
    """The layers in order: ``layers - 1`` blocks Linear+tanh, then a final Linear head.

    Each block is one layer so a stage boundary can fall between any two of them.
    """
    cfg = _cfg(config)
    gen = torch.Generator().manual_seed(seed)
    widths = (
        [int(cfg["d_in"])] + [int(cfg["hidden"])] * (int(cfg["layers"]) - 1) + [int(cfg["d_out"])]
    )
    layers: list[nn.Module] = []
    for i in range(int(cfg["layers"])):
        lin = nn.Linear(widths[i], widths[i + 1], dtype=dtype)
        with torch.no_grad():
            bound = 1.0 / widths[i] ** 0.5
            lin.weight.copy_(torch.empty_like(lin.weight).uniform_(-bound, bound, generator=gen))
            lin.bias.copy_(torch.empty_like(lin.bias).uniform_(-bound, bound, generator=gen))
        last = i == int(cfg["layers"]) - 1
        layers.append(lin if last else nn.Sequential(lin, nn.Tanh()))
    return layers


def sample_batch(
    B: int, config: dict[str, Any] | None, seed: int = 0, dtype: torch.dtype = torch.float64
) -> tuple[torch.Tensor, torch.Tensor]:
    """``(inputs[B, d_in], targets[B, d_out])`` drawn from a seeded normal distribution."""
    cfg = _cfg(config)
    gen = torch.Generator().manual_seed(10_000 + seed)
    x = torch.randn(B, int(cfg["d_in"]), generator=gen, dtype=dtype)
    y = torch.randn(B, int(cfg["d_out"]), generator=gen, dtype=dtype)
    return x, y


def loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """Sum over samples of the per-sample squared error (callers divide by B, docs/MODEL.md §5)."""
    return ((output - targets) ** 2).sum()


MODELS: dict[str, ModelSpec] = {
    "tiny-mlp": ModelSpec(
        name="tiny-mlp",
        build=build,
        sample_batch=sample_batch,
        loss=loss,
        default_config=dict(DEFAULT_CONFIG),
    ),
}
