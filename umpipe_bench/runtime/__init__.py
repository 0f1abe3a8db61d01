"""The runtime: execute any plan on hardware with torch.distributed (docs/MODEL.md §5).

One process per stage (``torchrun``), point-to-point sends of each producer microbatch,
re-chunking into the consumer's sizes, both memory modes, any schedule's op lists, checked
shapes, a peer check against ``torch.distributed.pipelining``, and failures that name the
stage. Modules:

* ``job``: problem + plans -> :class:`RunSpec` (refuses what cannot run); pure.
* ``launcher``: ``torchrun`` with a deadline, a process sweep, failure diagnosis; pure.
* ``report``: measured vs predicted rows, CSV; pure.
* ``torch_schedules``: torch.distributed.pipelining's schedule classes, their chunk layouts and
  rules, the spec of a run of many of them; pure.
* ``comparison``, ``op_costs``, ``scatter``: measured comparisons of executed plans (the plans
  ``scripts/measure_real.py`` and ``scripts/prediction_scatter.py`` run, per-op costs against
  the profile, the prediction scatter); pure.
* ``torch_entries``, ``torch_report``: the entries of a measured run of torch's schedules and
  its predicted-against-measured pages (``scripts/measure_torch_schedules.py``); pure.
* ``worker``, ``executor``, ``comm``, ``rechunk``, ``stages``, ``peer``, ``reference``,
  ``torch_multi`` (every torch schedule, several chunks per rank): torch.

Names are imported lazily so that launching a run does not import torch in the launcher.
"""

from __future__ import annotations

import importlib
from typing import Any

__all__ = [
    "PeerLostError",
    "PlanRefused",
    "PlannedRun",
    "RunSpec",
    "RunTimeout",
    "RuntimeFailure",
    "ShapeMismatchError",
    "StageFailure",
    "launch",
    "make_spec",
    "reference_gradients",
    "spec_for_problem",
    "summarize",
]

_WHERE = {
    "PeerLostError": "errors",
    "PlanRefused": "errors",
    "RunTimeout": "errors",
    "RuntimeFailure": "errors",
    "ShapeMismatchError": "errors",
    "StageFailure": "errors",
    "PlannedRun": "job",
    "make_spec": "job",
    "spec_for_problem": "job",
    "RunSpec": "spec",
    "launch": "launcher",
    "reference_gradients": "reference",
    "summarize": "report",
}


def __getattr__(name: str) -> Any:
    if name in _WHERE:
        return getattr(importlib.import_module(f"{__name__}.{_WHERE[name]}"), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
