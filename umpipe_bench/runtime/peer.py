"""The peer check: the same EDP plans run by ``torch.distributed.pipelining``.

torch's ``ScheduleGPipe`` / ``Schedule1F1B`` split the batch with ``tensor_split`` into ``M``
equal microbatches, i.e. EDP(M) in stash mode, on the very same stage modules we execute.
Their receive buffers are sized by the first microbatch (pytorch#126600), so only ``M`` that
divide ``B`` are run here. The loss is ``sum / B`` with ``scale_grads=False``, the same
gradient as ours (docs/MODEL.md §5).
"""

from __future__ import annotations

from collections.abc import Callable

import torch
from torch import nn

__all__ = ["TorchPipelineRunner"]


class TorchPipelineRunner:
    """One stage's view of a torch pipelining schedule for EDP(M)."""

    def __init__(
        self,
        schedule: str,
        M: int,
        stage: int,
        S: int,
        B: int,
        module: nn.Module,
        loss_fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor],
        device: torch.device,
        inputs: torch.Tensor | None,
        targets: torch.Tensor | None,
    ) -> None:
        from torch.distributed.pipelining import PipelineStage, Schedule1F1B, ScheduleGPipe

        if B % M:
            raise ValueError(
                f"torch.distributed.pipelining needs M to divide B (pytorch#126600); M={M}, B={B}"
            )
        classes = {"gpipe": ScheduleGPipe, "1f1b": Schedule1F1B}
        if schedule not in classes:
            raise ValueError(f"no torch.distributed.pipelining schedule for {schedule!r}")
        self.stage, self.S = stage, S
        self.inputs, self.targets = inputs, targets
        self._pstage = PipelineStage(module, stage, S, device)

        def loss(out: torch.Tensor, tgt: torch.Tensor) -> torch.Tensor:
            return loss_fn(out, tgt) / B

        self._sched = classes[schedule](self._pstage, M, loss_fn=loss, scale_grads=False)

    def step(self) -> float | None:
        """One iteration; returns the loss on the last stage (sum over microbatches)."""
        losses: list[torch.Tensor] = []
        if self.stage == 0:
            self._sched.step(self.inputs)
        elif self.stage == self.S - 1:
            self._sched.step(target=self.targets, losses=losses, return_outputs=False)
            return float(sum(float(x.detach()) for x in losses))
        else:
            self._sched.step()
        return None
