"""Rebuild a problem's stages from its model definition and layer grouping (docs/MODEL.md §1, §5).

A profiled problem's ``provenance`` records ``model``, ``config`` and ``layers_per_stage``;
building the model with the same ``seed`` and ``dtype`` on every rank gives every stage the
same parameters as a single-process reference, which is what the gradient check relies on.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import torch
from torch import nn

from .errors import PlanRefused
from .grouping import normalize_layers_per_stage, stage_source

__all__ = [
    "DTYPES",
    "build_stages",
    "normalize_layers_per_stage",
    "parse_dtype",
    "stage_source",
]

DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "bfloat16": torch.bfloat16,
    "float16": torch.float16,
}


def parse_dtype(name: str) -> torch.dtype:
    """``"float32"`` -> ``torch.float32``; an unknown name lists the valid ones."""
    key = name.lower().removeprefix("torch.")
    if key not in DTYPES:
        raise PlanRefused(f"unknown dtype {name!r}; valid dtypes: {', '.join(DTYPES)}")
    return DTYPES[key]


def build_stages(
    model: str,
    config: Mapping[str, Any],
    layers_per_stage: Sequence[Any],
    dtype: torch.dtype,
    seed: int,
) -> list[nn.Sequential]:
    """All stages as ``nn.Sequential`` modules (the full model is built once, then grouped)."""
    from umpipe_bench.problems.models import get_model

    layers = get_model(model).build(dict(config), dtype, seed)
    groups = normalize_layers_per_stage(layers_per_stage, len(layers))
    return [nn.Sequential(*(layers[i] for i in g)) for g in groups]
