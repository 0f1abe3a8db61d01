"""Which model layers each stage holds, from a problem's provenance (docs/MODEL.md §1).

Pure Python (no torch), so the launcher can check a problem before any worker starts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from .errors import PlanRefused

__all__ = ["normalize_layers_per_stage", "stage_source"]


def normalize_layers_per_stage(
    layers_per_stage: Sequence[Any], n_layers: int | None = None
) -> list[list[int]]:
    """Per-stage layer-index lists from either form a problem file may use.

    Accepts counts (``[3, 5]``: stage 0 gets layers 0..2, stage 1 layers 3..7) or explicit
    index lists (``[[0, 1, 2], [3, 4, 5, 6, 7]]``). The groups must be contiguous, in order,
    non-empty and, when ``n_layers`` is given, cover every layer exactly once.
    """
    if not layers_per_stage:
        raise PlanRefused("layers_per_stage is empty")
    groups: list[list[int]] = []
    if all(isinstance(x, int) for x in layers_per_stage):
        first = 0
        for s, count in enumerate(layers_per_stage):
            if count <= 0:
                raise PlanRefused(f"layers_per_stage: stage {s} has {count} layers")
            groups.append(list(range(first, first + count)))
            first += count
    else:
        for s, g in enumerate(layers_per_stage):
            if isinstance(g, Mapping) or isinstance(g, (str, bytes)) or not isinstance(g, Sequence):
                raise PlanRefused(
                    f"layers_per_stage: stage {s} must be a list of layer indices, got {g!r}"
                )
            groups.append([int(i) for i in g])
    expected = 0
    for s, g in enumerate(groups):
        if not g:
            raise PlanRefused(f"layers_per_stage: stage {s} has no layers")
        if g != list(range(expected, expected + len(g))):
            raise PlanRefused(
                f"layers_per_stage: stage {s} has layers {g}; stages must hold contiguous layers "
                f"in order, starting at layer {expected}"
            )
        expected += len(g)
    if n_layers is not None and expected != n_layers:
        raise PlanRefused(f"layers_per_stage covers {expected} layers but the model has {n_layers}")
    return groups


def stage_source(provenance: Mapping[str, Any]) -> tuple[str, dict[str, Any], list[Any]]:
    """``(model, config, layers_per_stage)`` from a problem's provenance, or refuse.

    Synthetic problems have no model: they can be simulated but not executed.
    """
    missing = [k for k in ("model", "layers_per_stage") if k not in provenance]
    if missing:
        raise PlanRefused(
            f"problem provenance lacks {', '.join(repr(k) for k in missing)}: the runtime cannot "
            "rebuild its stages (only profiled problems can be executed)"
        )
    return (
        str(provenance["model"]),
        dict(provenance.get("config") or {}),
        list(provenance["layers_per_stage"]),
    )
