"""VGG16 as a list of 16 pipeline layers: 13 convolutions and 3 fully connected layers.

Simonyan & Zisserman (2015), configuration D. Each conv layer is Conv3x3 + ReLU, with the
2x2 max-pool that follows it in the original network folded into the same layer (so there are
exactly 13 conv layers). The first fc layer flattens its input, so its width depends on the
image size: ``8 * width * (image / 32) ** 2`` inputs (no adaptive pooling; the image side must be
a multiple of 32). No BatchNorm and dropout 0: each sample's output depends on that sample only
(docs/MODEL.md §5).

``vgg16-mini`` keeps the 16-layer structure with 40/64 of the channels, a 32-pixel image, narrow
fc layers and 10 classes so a fwd+bwd iteration at B = 32 takes about half a second on one core.

``vgg16-hr`` is VGG16 at a high resolution and a narrow width (128 px, 16 channels in the first
conv, the full 4096-wide classifier and 1000 classes), a candidate 2-stage workload
(results/real/workload.md).

``vgg16-stem`` is VGG16's first two conv blocks (``convs`` = 4 conv layers) at 128 px and width
32, then VGG's classifier on the features max-pooled to the (image / 32)-sided grid that
VGG16's remaining pools would give (4096, 4096, 1000): 7 layers, the workload vgg16-stem-s2,
chosen because its two halves want opposite microbatch sizes on one CPU core. The first convs
work on large activations (2 MiB per sample after the first conv), so a larger microbatch falls
out of the caches and costs more per sample; the classifier's backward reads and writes its
25 M weights once per call whatever the microbatch, so it wants few calls. How it was chosen:
results/real/README.md.

``loss`` is the SUM over samples of each sample's cross-entropy (callers divide by B).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from umpipe_bench.errors import UserInputError
from umpipe_bench.problems.models import ModelSpec, merge_config

__all__ = [
    "MODELS", "VGG16_CONFIG", "VGG16_HR_CONFIG", "VGG16_MINI_CONFIG", "VGG16_STEM_CONFIG", "loss",
    "resolve_config",
]

# Output channels of the 13 conv layers as multiples of "width"; "M" marks a folded max-pool.
_PLAN: tuple[int | str, ...] = (1, 1, "M", 2, 2, "M", 4, 4, 4, "M", 8, 8, 8, "M", 8, 8, 8, "M")

VGG16_CONFIG: dict[str, Any] = {
    # pixels per side (ImageNet uses 224; see umpipe_bench/problems/data provenance for the choice)
    "image": 64,
    "width": 64,  # channels of the first conv; later convs use 2x, 4x, 8x
    "fc": 4096,
    "classes": 1000,
}

VGG16_MINI_CONFIG: dict[str, Any] = {"image": 32, "width": 40, "fc": 512, "classes": 10}

VGG16_HR_CONFIG: dict[str, Any] = {"image": 128, "width": 16, "fc": 4096, "classes": 1000}

VGG16_STEM_CONFIG: dict[str, Any] = {
    "image": 128, "width": 32, "convs": 4, "fc": 4096, "classes": 1000,
}


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


class PooledFCLayer(FCLayer):
    """Max-pool by ``k`` (the pools of the dropped conv layers), then the first fc layer."""

    def __init__(self, fin: int, fout: int, k: int) -> None:
        super().__init__(fin, fout, relu=True, flatten=True)
        self.k = k

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(F.max_pool2d(x, self.k) if self.k > 1 else x)


def _stem_builder(defaults: dict[str, Any]):
    def build(config: dict[str, Any] | None, dtype: torch.dtype, seed: int) -> list[nn.Module]:
        """The first ``convs`` conv layers of VGG16, then its 3 fc layers, seeded, in ``dtype``."""
        c = resolve_config(config, defaults)
        if c["convs"] > 13:
            raise UserInputError(f"vgg16-stem config: field 'convs' must be 1..13, got "
                                 f"{c['convs']}")
        layers: list[nn.Module] = []
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            cin, side = 3, c["image"]
            for i, item in enumerate(_PLAN):
                if item == "M":
                    continue
                if len(layers) == c["convs"]:
                    break
                cout = int(item) * c["width"]
                pool = i + 1 < len(_PLAN) and _PLAN[i + 1] == "M"
                layers.append(ConvLayer(cin, cout, pool))
                cin, side = cout, side // 2 if pool else side
            out = c["image"] // 32
            layers.append(PooledFCLayer(cin * out * out, c["fc"], side // out))
            layers.append(FCLayer(c["fc"], c["fc"], relu=True, flatten=False))
            layers.append(FCLayer(c["fc"], c["classes"], relu=False, flatten=False))
        return [layer.to(dtype) for layer in layers]

    return build


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
    "vgg16-stem": ModelSpec(
        "vgg16-stem",
        _stem_builder(VGG16_STEM_CONFIG),
        _sampler(VGG16_STEM_CONFIG),
        loss,
        dict(VGG16_STEM_CONFIG),
    ),
    "vgg16-hr": ModelSpec(
        "vgg16-hr",
        _builder(VGG16_HR_CONFIG),
        _sampler(VGG16_HR_CONFIG),
        loss,
        dict(VGG16_HR_CONFIG),
    ),
}
