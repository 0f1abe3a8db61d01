"""Known by construction: with equal costs per operation and free links, the simulated
bubbles of torch's schedules equal the published formulas (docs/TORCH-SCHEDULES.md §5).

Units: every layer costs ``T_F = T_I = T_W = 1`` per microbatch, the full backward
``T_B = T_I + T_W``; a device holding ``n`` layers has stage costs ``n`` times those. The bubble
of a device is ``T`` minus its busy time ``M * n * (T_F + T_I + T_W)``.
"""

from __future__ import annotations

import pytest

from tests.test_devsim import _uniform
from umpipe_bench.devsim import simulate_devices
from umpipe_bench.layout import chunk_devices, group_layers
from umpipe_bench.torch_schedules import ScheduleShapeError, check, schedule_info, torch_orders

F, I, W = 1.0, 1.0, 1.0  # noqa: E741


def _bubble(name: str, p: int, M: int, v: int, layers_per_device: int) -> float:
    info = schedule_info(name)
    C = p * v
    L = p * layers_per_device
    prob = group_layers(_uniform(L, M, F, I + W, i=I, w=W), [L // C] * C)
    tl = simulate_devices(prob, chunk_devices(info.layout, p, v),
                          torch_orders(name, p, M, None if info.layout == "one" else v),
                          (1,) * M)
    assert tl.transfers == [] or all(t1 == t0 for *_, t0, t1 in tl.transfers)
    return tl.iteration_time - M * layers_per_device * (F + I + W)


def _valid(name: str, p: int, M: int, v: int | None) -> bool:
    try:
        check(name, p, M, v)
    except ScheduleShapeError:
        return False
    return True


@pytest.mark.parametrize("p", range(2, 9))
def test_1f1b_bubble_is_p_minus_1_times_f_plus_b(p):
    """Narayanan et al. / Qi et al.: (p-1)(T_F + T_B), exact for M >= p."""
    for M in range(p, 17):
        for n in (1, 2):
            assert _bubble("1f1b", p, M, 1, n) == pytest.approx((p - 1) * n * (F + I + W))


@pytest.mark.parametrize("p", range(2, 9))
def test_zb1p_with_one_chunk_is_zb_h1(p):
    """Qi et al. (ICLR 2024), ZB-H1: (p-1)(T_F + T_I - T_W), exact for M >= p when
    T_F = T_I = T_W (the schedule torch's ScheduleInterleavedZeroBubble runs at v = 1)."""
    for M in range(p, 17):
        if not _valid("zb1p", p, M, 1):
            continue
        for n in (1, 2):
            assert _bubble("zb1p", p, M, 1, n) == pytest.approx((p - 1) * n * (F + I - W))


@pytest.mark.parametrize("p", range(2, 9))
@pytest.mark.parametrize("v", [2, 3])
def test_interleaved_1f1b_bubble_is_one_vth_of_1f1b(p, v):
    """Narayanan et al. (SC'21): v chunks per device cut 1F1B's bubble to (p-1)(T_F+T_B)/v;
    exact here when M is a multiple of p (each chunk holds n/v of a device's layers)."""
    for M in range(p, 17, p):
        if not _valid("interleaved-1f1b", p, M, v):
            continue
        assert _bubble("interleaved-1f1b", p, M, v, v) == \
            pytest.approx(_bubble("1f1b", p, M, 1, v) / v)
