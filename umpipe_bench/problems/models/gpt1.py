"""GPT-1 as a list of pipeline layers: embedding, 12 decoder blocks, LM head (14 layers).

The shapes follow Radford et al. (2018): learned token and position embeddings, post-LayerNorm
decoder blocks with causal multi-head self-attention (d_model 768, 12 heads) and a GELU MLP
(3072), and an untied LM head over the 40,478-token BPE vocabulary. Dropout is 0 and there is
no BatchNorm, so every sample's output depends on that sample only (docs/MODEL.md §5: the runtime's
gradient check needs per-sample independence).

``gpt1-mini`` has the same 14-layer structure with a narrow width, a short sequence and a small
vocabulary so one fwd+bwd iteration at B = 32 runs in about a second on one core; it is the GPT
the runtime executes for real.

The per-sample loss is the mean token cross-entropy of that sample; ``loss`` returns the SUM
over samples (callers divide by B, docs/MODEL.md §5).
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from umpipe_bench.errors import UserInputError
from umpipe_bench.problems.models import ModelSpec, merge_config

__all__ = ["GPT1_CONFIG", "GPT1_MINI_CONFIG", "MODELS", "loss", "resolve_config"]

GPT1_CONFIG: dict[str, Any] = {
    "seq": 32,  # tokens per sample (GPT-1 used 512; 32 keeps a profile under ~10 min on one core)
    "vocab": 40478,
    "d_model": 768,
    "heads": 12,
    "mlp": 3072,
    "blocks": 12,
}

GPT1_MINI_CONFIG: dict[str, Any] = {
    "seq": 16,
    "vocab": 4096,
    "d_model": 256,
    "heads": 4,
    "mlp": 1024,
    "blocks": 12,
}

_INT_KEYS = ("seq", "vocab", "d_model", "heads", "mlp", "blocks")


def resolve_config(config: dict[str, Any] | None, defaults: dict[str, Any]) -> dict[str, Any]:
    """Merge ``config`` over ``defaults`` and check every field; errors name the field."""
    merged = merge_config("gpt1", config, defaults, _INT_KEYS)
    if merged["d_model"] % merged["heads"]:
        raise UserInputError(
            f"gpt1 config: field 'd_model' ({merged['d_model']}) must be divisible by "
            f"'heads' ({merged['heads']})"
        )
    return merged


class Embedding(nn.Module):
    """Token + learned position embedding: int64 tokens (m, seq) -> hidden (m, seq, d_model)."""

    def __init__(self, vocab: int, seq: int, d_model: int) -> None:
        super().__init__()
        self.tokens = nn.Embedding(vocab, d_model)
        self.positions = nn.Embedding(seq, d_model)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        pos = torch.arange(ids.shape[1], device=ids.device)
        return self.tokens(ids) + self.positions(pos)


class DecoderBlock(nn.Module):
    """GPT-1 post-LN decoder block: x = LN(x + Attn(x)); x = LN(x + MLP(x)); causal attention."""

    def __init__(self, d_model: int, heads: int, mlp: int) -> None:
        super().__init__()
        self.heads = heads
        self.qkv = nn.Linear(d_model, 3 * d_model)
        self.proj = nn.Linear(d_model, d_model)
        self.ln1 = nn.LayerNorm(d_model)
        self.fc = nn.Linear(d_model, mlp)
        self.out = nn.Linear(mlp, d_model)
        self.ln2 = nn.LayerNorm(d_model)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        m, t, d = x.shape
        q, k, v = self.qkv(x).view(m, t, 3, self.heads, d // self.heads).permute(2, 0, 3, 1, 4)
        a = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        x = self.ln1(x + self.proj(a.transpose(1, 2).reshape(m, t, d)))
        return self.ln2(x + self.out(F.gelu(self.fc(x))))


class LMHead(nn.Module):
    """Untied output projection to vocabulary logits (m, seq, vocab)."""

    def __init__(self, d_model: int, vocab: int) -> None:
        super().__init__()
        self.proj = nn.Linear(d_model, vocab, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.proj(x)


def _init_weights(module: nn.Module) -> None:
    # GPT-1 initialisation: N(0, 0.02) weights, zero biases, unit LayerNorm.
    if isinstance(module, (nn.Linear, nn.Embedding)):
        nn.init.normal_(module.weight, mean=0.0, std=0.02)
        if getattr(module, "bias", None) is not None:
            nn.init.zeros_(module.bias)


def _builder(defaults: dict[str, Any]):
    def build(config: dict[str, Any] | None, dtype: torch.dtype, seed: int) -> list[nn.Module]:
        """The layers (embedding, ``blocks`` decoder blocks, LM head), seeded, in ``dtype``."""
        c = resolve_config(config, defaults)
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(seed)
            layers: list[nn.Module] = [Embedding(c["vocab"], c["seq"], c["d_model"])]
            layers += [DecoderBlock(c["d_model"], c["heads"], c["mlp"]) for _ in range(c["blocks"])]
            layers.append(LMHead(c["d_model"], c["vocab"]))
            for layer in layers:
                layer.apply(_init_weights)
        return [layer.to(dtype) for layer in layers]

    return build


def _sampler(defaults: dict[str, Any]):
    def sample_batch(
        B: int, config: dict[str, Any] | None, seed: int, dtype: torch.dtype
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """Random token sequences: inputs (B, seq) and next-token targets (B, seq), int64."""
        c = resolve_config(config, defaults)
        g = torch.Generator().manual_seed(seed)
        tokens = torch.randint(0, c["vocab"], (B, c["seq"] + 1), generator=g)
        return tokens[:, :-1].contiguous(), tokens[:, 1:].contiguous()

    return sample_batch


def loss(output: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """SUM over samples of each sample's mean token cross-entropy (docs/MODEL.md §5)."""
    seq = output.shape[1]
    ce = F.cross_entropy(output.flatten(0, 1), targets.flatten(), reduction="sum")
    return ce / seq


MODELS: dict[str, ModelSpec] = {
    "gpt1": ModelSpec(
        "gpt1", _builder(GPT1_CONFIG), _sampler(GPT1_CONFIG), loss, dict(GPT1_CONFIG)
    ),
    "gpt1-mini": ModelSpec(
        "gpt1-mini",
        _builder(GPT1_MINI_CONFIG),
        _sampler(GPT1_MINI_CONFIG),
        loss,
        dict(GPT1_MINI_CONFIG),
    ),
}
