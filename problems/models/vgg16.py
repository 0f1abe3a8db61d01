"""VGG16 as a list of 16 pipeline layers: 13 convolutions and 3 fully connected layers.

Simonyan & Zisserman (2015), configuration D. Each conv layer is Conv3x3 + ReLU, with the
2x2 max-pool that follows it in the original network folded into the same layer (so there are
exactly 13 conv layers). The first fc layer flattens its input, so its width depends on the
image size: ``8 * width * (image / 32) ** 2`` inputs (no adaptive pooling; the image side must be
a multiple of 32). No BatchNorm and dropout 0: each sample's output depends on that sample only
(docs/MODEL.md §5).

``vgg16-mini`` keeps the 16-layer structure with 40/64 of the channels, a 32-pixel image, narrow
fc layers and 10 classes so a fwd+bwd iteration at B = 32 takes about half a second on one core.

``loss`` is the SUM over samples of each sample's cross-entropy (callers divide by B).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from problems.models import ModelSpec, merge_config
from umpipe_bench.errors import UserInputError

__all__ = ["MODELS", "VGG16_CONFIG", "VGG16_MINI_CONFIG", "loss", "resolve_config"]

# Output channels of the 13 conv layers as multiples of "width"; "M" marks a folded max-pool.
_PLAN: tuple[int | str, ...] = (1, 1, "M", 2, 2, "M", 4, 4, 4, "M", 8, 8, 8, "M", 8, 8, 8, "M")

VGG16_CONFIG: dict[str, Any] = {
    "image": 64,  # pixels per side (ImageNet uses 224; see problems/data provenance for the choice)
    "width": 64,  # channels of the first conv; later convs use 2x, 4x, 8x
    "fc": 4096,
    "classes": 1000,
}

VGG16_MINI_CONFIG: dict[str, Any] = {"image": 32, "width": 40, "fc": 512, "classes": 10}


def resolve_config(config: dict[str, Any] | None, defaults: dict[str, Any]) -> dict[str, Any]:
    """Merge ``config`` over ``defaults`` and check every field; errors name the field."""
    merged = merge_config("vgg16", config, defaults)
    if merged["image"] % 32:
        raise UserInputError(
            f"vgg16 config: field 'image' must be a multiple of 32, got {merged['image']}"
        )
    return merged


class ConvLayer(nn.Module):
    """Conv3x3(pad 1) + ReLU, optionally followed by the folded 2x2 max-pool."""

    def __init__(self, cin: int, cout: int, pool: bool) -> None:
        super().__init__()
        self.conv = nn.Conv2d(cin, cout, kernel_size=3, padding=1)
        self.pool = pool

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.relu(self.conv(x))
        return F.max_pool2d(x, 2) if self.pool else x


class FCLayer(nn.Module):
    """Linear (+ ReLU unless last); the first one flattens its (m, C, H, W) input."""

    def __init__(self, fin: int, fout: int, relu: bool, flatten: bool) -> None:
        super().__init__()
        self.fc = nn.Linear(fin, fout)
        self.relu = relu
        self.flatten = flatten

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        if self.flatten:
            x = x.flatten(1)
        x = self.fc(x)
        return F.relu(x) if self.relu else x


def _builder(defaults: dict[str, Any]):
    def build(config: dict[str, Any] | None, dtype: torch.dtype, seed: int) -> list[nn.Module]:
        """The 16 layers (13 conv + 3 fc), seeded and in ``dtype``."""
        c = resolve_config(config, defaults)
        layers: list[nn.Module] = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            cin = 3
            for i, item in enumerate(_PLAN):
                if item == "M":
                    continue
                cout = int(item) * c["width"]
                pool = i + 1 < len(_PLAN) and _PLAN[i + 1] == "M"
                layers.append(ConvLayer(cin, cout, pool))
                cin = cout
            side = c["image"] // 32
            layers.append(FCLayer(cin * side * side, c["fc"], relu=True, flatten=True))
            layers.append(FCLayer(c["fc"], c["fc"], relu=True, flatten=False))
            layers.append(FCLayer(c["fc"], c["classes"], relu=False, flatten=False))
        return [layer.to(dtype) for layer in layers]

    return build


def _sampler(defaults: dict[str, Any]):
    def sample_batch(
        B: int, config: dict[str, Any] | None, seed: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random images (B, 3, image, image) in ``dtype`` and class labels (B,) int64."""
        c = resolve_config(config, defaults)
        g = torch.Generator().manual_seed(seed)
        images = torch.randn(B, 3, c["image"], c["image"], generator=g).to(dtype)
        labels = torch.randint(0, c["classes"], (B,), generator=g)
        return images, labels

    return sample_batch


def loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """SUM over samples of each sample's cross-entropy (docs/MODEL.md §5)."""
    return F.cross_entropy(output, targets, reduction="sum")


MODELS: dict[str, ModelSpec] = {
    "vgg16": ModelSpec(
        "vgg16", _builder(VGG16_CONFIG), _sampler(VGG16_CONFIG), loss, dict(VGG16_CONFIG)
    ),
    "vgg16-mini": ModelSpec(
        "vgg16-mini",
        _builder(VGG16_MINI_CONFIG),
        _sampler(VGG16_MINI_CONFIG),
        loss,
        dict(VGG16_MINI_CONFIG),
    ),
}
