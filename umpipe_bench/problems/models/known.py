"""``tiny-known``: a synthetic model whose per-layer cost is known by construction.

Layer i multiplies its input by its own square weight ``work[i]`` times in a row, so its
forward does exactly ``2 * rows * hidden**2 * work[i]`` flops per sample and its backward about
twice that. With the default ``work = (1, 4, 1, 16)`` a correct profiler must rank layer 3 far
above layer 1, which is far above layers 0 and 2, and stage costs must grow with the number of
samples: tests check those orderings and rough ratios (the torchgpipe habit of testing the
profiler on layers whose answer is known in advance).

Samples are ``(rows, hidden)`` matrices; each sample is processed independently (docs/MODEL.md §5).
The weights are random orthogonal matrices so repeated products keep the scale of the input.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from umpipe_bench.errors import UserInputError
from umpipe_bench.problems.models import ModelSpec

__all__ = ["KNOWN_CONFIG", "MODELS", "RepeatedMatmul", "loss", "resolve_config"]

KNOWN_CONFIG: dict[str, Any] = {"hidden": 128, "rows": 16, "work": [1, 4, 1, 16]}


def resolve_config(config: dict[str, Any] | None) -> dict[str, Any]:
    """Merge ``config`` over :data:`KNOWN_CONFIG`; errors name the field."""
    merged = dict(KNOWN_CONFIG)
    for key, value in (config or {}).items():
        if key not in KNOWN_CONFIG:
            raise UserInputError(
                f"tiny-known config: unknown field {key!r}; valid fields: {', '.join(KNOWN_CONFIG)}"
            )
        merged[key] = value
    for key in ("hidden", "rows"):
        v = merged[key]
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise UserInputError(
                f"tiny-known config: field {key!r} must be a positive int, got {v!r}")
    work = merged["work"]
    if (
        not isinstance(work, (list, tuple))
        or not work
        or any(isinstance(k, bool) or not isinstance(k, int) or k < 1 for k in work)
    ):
        raise UserInputError(
            f"tiny-known config: field 'work' must be a non-empty list of ints >= 1, got {work!r}"
        )
    merged["work"] = list(work)
    return merged


class RepeatedMatmul(nn.Module):
    """x -> x @ W applied ``work`` times: cost proportional to ``work`` by construction."""

    def __init__(self, hidden: int, work: int) -> None:
        super().__init__()
        q, _ = torch.linalg.qr(torch.randn(hidden, hidden))
        self.weight = nn.Parameter(q)
        self.work = work

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        for _ in range(self.work):
            x = x @ self.weight
        return x


def build(config: dict[str, Any] | None, dtype: torch.dtype, seed: int) -> list[nn.Module]:
    """One :class:`RepeatedMatmul` per entry of ``work``, seeded and in ``dtype``."""
    c = resolve_config(config)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        layers = [RepeatedMatmul(c["hidden"], k) for k in c["work"]]
    return [layer.to(dtype) for layer in layers]


def sample_batch(
    B: int, config: dict[str, Any] | None, seed: int, dtype: torch.dtype
) -> tuple[torch.Tensor, torch.Tensor]:
    """Random inputs and targets, both (B, rows, hidden) in ``dtype``."""
    c = resolve_config(config)
    g = torch.Generator().manual_seed(seed)
    shape = (B, c["rows"], c["hidden"])
    return torch.randn(shape, generator=g).to(dtype), torch.randn(shape, generator=g).to(dtype)


def loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """SUM over samples of each sample's squared error (docs/MODEL.md §5)."""
    return 0.5 * ((output - targets) ** 2).sum()


MODELS: dict[str, ModelSpec] = {
    "tiny-known": ModelSpec("tiny-known", build, sample_batch, loss, dict(KNOWN_CONFIG)),
}
