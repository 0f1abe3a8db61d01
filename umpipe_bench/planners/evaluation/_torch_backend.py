"""The closed form of :mod:`._closed_form` on torch tensors (CPU or GPU), imported lazily.

It pays where a GPU is present and populations are large (thousands of individuals): every
step is a whole-array kernel. float64 throughout, so results match the numpy closed form.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from ._closed_form import closed_form_backward, closed_form_forward

__all__ = ["TorchEvaluator"]


class _TorchOps:
    inf = float("inf")

    def __init__(self, device: torch.device) -> None:
        self.device = device

    @staticmethod
    def cumsum(x: Any) -> Any:
        return torch.cumsum(x, dim=1)

    @staticmethod
    def cummax(x: Any) -> Any:
        return torch.cummax(x, dim=1).values

    @staticmethod
    def rev_cummin(x: Any) -> Any:
        return torch.flip(torch.cummin(torch.flip(x, dims=(1,)), dim=1).values, dims=(1,))

    @staticmethod
    def where(c: Any, a: Any, b: Any) -> Any:
        if not torch.is_tensor(a):
            a = torch.as_tensor(a, dtype=b.dtype if torch.is_tensor(b) else None,
                                device=c.device)
        if not torch.is_tensor(b):
            b = torch.as_tensor(b, dtype=a.dtype, device=c.device)
        return torch.where(c, a, b)

    @staticmethod
    def maximum(a: Any, b: Any) -> Any:
        if not torch.is_tensor(b):
            return torch.clamp(a, min=b)
        return torch.maximum(a, b)

    @staticmethod
    def shift_right(x: Any, fill: float) -> Any:
        out = torch.empty_like(x)
        out[:, 0] = fill
        out[:, 1:] = x[:, :-1]
        return out

    @staticmethod
    def ends(bits: Any) -> Any:
        N, L = bits.shape
        E = torch.ones((N, L + 1), dtype=torch.bool, device=bits.device)
        E[:, :L] = bits.bool()
        return E

    @staticmethod
    def positions(N: int, B: int, like: Any) -> Any:
        return torch.arange(B, device=like.device).expand(N, B)

    @staticmethod
    def empty(N: int, S: int, like: Any) -> Any:
        return torch.empty((N, S), dtype=torch.float64, device=like.device)

    @staticmethod
    def column(x: Any, j: int) -> Any:
        return x[:, j]

    @staticmethod
    def any_cut(bits: Any) -> Any:
        return bits.bool().any(dim=1, keepdim=True)


class TorchEvaluator:
    """Holds the problem's tables on ``device`` and evaluates numpy bit arrays there."""

    def __init__(self, tables: dict[str, np.ndarray], device: str | None = None) -> None:
        dev = torch.device(device or ("cuda" if torch.cuda.is_available() else "cpu"))
        self.device = dev
        self.ops = _TorchOps(dev)
        self.t = {k: torch.tensor(np.array(v), dtype=torch.float64, device=dev)
                  for k, v in tables.items()}

    def _bits(self, bits: np.ndarray) -> Any:
        return torch.as_tensor(np.ascontiguousarray(bits), device=self.device)

    def forward(self, fb: np.ndarray) -> np.ndarray:
        t = self.t
        F = closed_form_forward(self.ops, self._bits(fb), t["fwd"], t["act"])
        return F.cpu().numpy()

    def backward(self, bb: np.ndarray, F_last: np.ndarray) -> np.ndarray:
        t = self.t
        Fl = torch.as_tensor(F_last, dtype=torch.float64, device=self.device)
        T = closed_form_backward(self.ops, self._bits(bb), t["cb"], t["cbf"],
                                 t["grad"], t["opt"], Fl)
        return T.cpu().numpy()

    def evaluate(self, fb: np.ndarray, bb: np.ndarray) -> np.ndarray:
        t = self.t
        F = closed_form_forward(self.ops, self._bits(fb), t["fwd"], t["act"])
        T = closed_form_backward(self.ops, self._bits(bb), t["cb"], t["cbf"],
                                 t["grad"], t["opt"], F)
        return T.cpu().numpy()
