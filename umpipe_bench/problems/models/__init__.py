"""Model definitions used by the profiler and the runtime (plain torch).

Each model module defines ``MODELS: dict[str, ModelSpec]``. Modules are imported lazily so that
listing problems never imports torch.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from umpipe_bench.errors import UnknownNameError, UserInputError

__all__ = ["ModelSpec", "get_model", "merge_config", "model_names"]

# model name -> module that defines it
_MODULES: dict[str, str] = {
    "gpt1": "umpipe_bench.problems.models.gpt1",
    "gpt1-mini": "umpipe_bench.problems.models.gpt1",
    "vgg16": "umpipe_bench.problems.models.vgg16",
    "vgg16-mini": "umpipe_bench.problems.models.vgg16",
    "vgg16-hr": "umpipe_bench.problems.models.vgg16",
    "vgg16-stem": "umpipe_bench.problems.models.vgg16",
    "tiny-mlp": "umpipe_bench.problems.models.tiny",
    "tiny-known": "umpipe_bench.problems.models.known",
}


@dataclass(frozen=True)
class ModelSpec:
    """How to build a model as a list of layers, make a batch, and score it.

    ``build(config, dtype, seed)`` returns the layers in order; ``sample_batch(B, config, seed,
    dtype)`` returns ``(inputs, targets)``; ``loss(output, targets)`` returns the SUM of the
    per-sample losses (callers divide by the mini-batch size, docs/MODEL.md §5).
    """

    name: str
    build: Callable[..., list[Any]]
    sample_batch: Callable[..., tuple[Any, Any]]
    loss: Callable[[Any, Any], Any]
    default_config: dict[str, Any] = field(default_factory=dict)


def model_names() -> list[str]:
    return sorted(_MODULES)


def get_model(name: str) -> ModelSpec:
    key = name.lower()
    if key not in _MODULES:
        raise UnknownNameError(f"unknown model {name!r}; valid models: {', '.join(model_names())}")
    module = importlib.import_module(_MODULES[key])
    return module.MODELS[key]


def merge_config(
    model: str, config: dict[str, Any] | None, defaults: dict[str, Any],
    int_keys: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Merge ``config`` over ``defaults``; unknown fields and non-positive integer fields
    (``int_keys``, default: all) raise a ``ValueError`` naming the model and the field."""
    merged = dict(defaults)
    for key, value in (config or {}).items():
        if key not in defaults:
            raise UserInputError(
                f"{model} config: unknown field {key!r}; valid fields: {', '.join(defaults)}"
            )
        merged[key] = value
    for key in defaults if int_keys is None else int_keys:
        value = merged[key]
        if isinstance(value, bool) or not isinstance(value, int) or value < 1:
            raise UserInputError(
                f"{model} config: field {key!r} must be a positive int, got {value!r}")
    return merged
