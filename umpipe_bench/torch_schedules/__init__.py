"""torch 2.13's pipeline schedules: names, layouts, limits, and the orders torch executes.

The package imports no torch; :func:`torch_orders` and :func:`torch_send_after` import it when
called. See
:mod:`umpipe_bench.torch_schedules.orders`.
"""

from __future__ import annotations

from .orders import (
    TORCH_SCHEDULES,
    ScheduleNameError,
    ScheduleShapeError,
    TorchSchedule,
    check,
    schedule_info,
    torch_orders,
    torch_send_after,
)

__all__ = [
    "TORCH_SCHEDULES",
    "ScheduleNameError",
    "ScheduleShapeError",
    "TorchSchedule",
    "check",
    "schedule_info",
    "torch_orders",
    "torch_send_after",
]
