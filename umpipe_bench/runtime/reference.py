"""Single-process full-batch reference gradients, the runtime's correctness bar (docs/MODEL.md §5).

After one iteration of any plan, schedule and memory mode, every parameter's gradient on every
stage must equal the gradient of ``sum of per-sample losses / B`` computed here in one process
on the whole batch, with the same model, seed and dtype.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import torch

from .stages import build_stages, parse_dtype

__all__ = [
    "compare_gradients",
    "load_chunk_gradients",
    "load_stage_gradients",
    "reference_gradients",
]


def reference_gradients(
    model: str,
    config: Mapping[str, Any],
    layers_per_stage: Sequence[Any],
    B: int,
    *,
    dtype: str = "float64",
    seed: int = 0,
) -> tuple[float, list[dict[str, torch.Tensor]]]:
    """``(loss, per-stage {parameter name: gradient})`` of one full-batch iteration."""
    from umpipe_bench.problems.models import get_model

    spec = get_model(model)
    dt = parse_dtype(dtype)
    stages = build_stages(model, config, layers_per_stage, dt, seed)
    x, y = spec.sample_batch(B, dict(config), seed, dt)
    out = x
    for st in stages:
        out = st(out)
    loss = spec.loss(out, y) / B
    loss.backward()
    grads = [
        {n: p.grad.detach().clone() for n, p in st.named_parameters() if p.grad is not None}
        for st in stages
    ]
    return float(loss.detach()), grads


def load_stage_gradients(
    run_dir: str | Path, entry: int, S: int
) -> tuple[float | None, list[dict[str, torch.Tensor | None]]]:
    """The gradients a run dumped (``RunSpec.dump_grads``) for entry number ``entry``."""
    loss = None
    grads = []
    for s in range(S):
        data = torch.load(Path(run_dir) / f"grads-e{entry}-s{s}.pt", weights_only=True)
        grads.append(data["grads"])
        if s == S - 1:
            loss = data["loss"]
    return loss, grads


def compare_gradients(
    ref: list[dict[str, torch.Tensor]],
    got: list[dict[str, torch.Tensor | None]],
    *,
    rtol: float = 1e-10,
    atol: float = 1e-12,
    unit: str = "stage",
) -> list[str]:
    """Human-readable mismatches (empty list: every gradient matches); each names the
    ``unit`` (``"stage"``, or ``"chunk"`` for chunk plans) by its index."""
    problems = []
    for s, (r, g) in enumerate(zip(ref, got, strict=True)):
        if set(r) != {k for k, v in g.items() if v is not None}:
            problems.append(
                f"{unit} {s}: parameters with gradients differ: {sorted(r)} vs {sorted(g)}"
            )
            continue
        for name, rv in r.items():
            gv = g[name]
            assert gv is not None
            if gv.shape != rv.shape or not torch.allclose(gv, rv, rtol=rtol, atol=atol):
                err = (gv - rv).abs().max().item() if gv.shape == rv.shape else float("nan")
                problems.append(f"{unit} {s}: gradient of {name} differs (max abs error {err:.3g})")
    return problems


def load_chunk_gradients(
    run_dir: str | Path, entry: int, devices: Sequence[int]
) -> tuple[float | None, list[dict[str, torch.Tensor | None]]]:
    """The gradients a chunk-plan run dumped (``ChunkRunSpec.dump_grads``) for entry number
    ``entry``, one dict per chunk (``devices[c]``: the device of chunk ``c``), in the form
    :func:`reference_gradients` gives for the chunks' layer groups."""
    loss = None
    per_device = {}
    for d in sorted(set(devices)):
        data = torch.load(Path(run_dir) / f"grads-e{entry}-d{d}.pt", weights_only=True)
        per_device[d] = data["grads"]
        if d == devices[-1]:
            loss = data["loss"]
    return loss, [per_device[d][c] for c, d in enumerate(devices)]
