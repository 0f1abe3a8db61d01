"""Torch layer-by-layer profiler: real models measured into problem files (docs/MODEL.md §1).

Façade (a pure algorithm behind a small measuring API, as torchgpipe's balance):

* :func:`profile_model` -- measure a registered model into a validated ``Problem``;
* :func:`split_backward_into` -- add the split-backward tables (docs/MODEL.md §1c) to an
  existing profiled problem file's ``Problem``;
* :func:`calibrate_link` -- gloo ping-pong between two local processes, fitted to
  ``latency + bytes / bandwidth``;
* :func:`balanced_partition`, :func:`size_grid`, :func:`fit_link` -- pure algorithms (no torch).

Names are resolved lazily so ``import umpipe_bench.profiler.partition`` does not import torch.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "Grouping",
    "LinkFigures",
    "balanced_partition",
    "calibrate_link",
    "fit_link",
    "parse_layers_per_stage",
    "profile_model",
    "size_grid",
    "split_backward_into",
]

_WHERE = {
    "Grouping": ".profile",
    "LinkFigures": ".profile",
    "profile_model": ".profile",
    "split_backward_into": ".profile",
    "calibrate_link": ".link",
    "balanced_partition": ".partition",
    "parse_layers_per_stage": ".partition",
    "size_grid": ".partition",
    "fit_link": ".linkfit",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(_WHERE[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
