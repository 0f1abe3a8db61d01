"""Model definitions: layer counts, shapes, config checks, per-sample independence (float64)."""

from __future__ import annotations

import pytest

torch = pytest.importorskip("torch")

from umpipe_bench.errors import UserInputError  # noqa: E402
from umpipe_bench.problems.models import get_model  # noqa: E402
from umpipe_bench.problems.models.gpt1 import GPT1_CONFIG, DecoderBlock, Embedding, LMHead  # noqa: E402
from umpipe_bench.problems.models.known import RepeatedMatmul  # noqa: E402
from umpipe_bench.problems.models.vgg16 import VGG16_CONFIG, ConvLayer, FCLayer  # noqa: E402

SMALL_GPT = {"seq": 8, "vocab": 50, "d_model": 32, "heads": 4, "mlp": 48}
SMALL_VGG = {"image": 32, "width": 4, "fc": 24, "classes": 7}


def _run(layers, x):
    for layer in layers:
        x = layer(x)
    return x


def test_gpt1_full_config_is_gpt1():
    assert GPT1_CONFIG["d_model"] == 768 and GPT1_CONFIG["heads"] == 12
    assert GPT1_CONFIG["mlp"] == 3072 and GPT1_CONFIG["blocks"] == 12
    assert GPT1_CONFIG["vocab"] == 40478


@pytest.mark.parametrize("name", ["gpt1", "gpt1-mini"])
def test_gpt1_has_14_layers_and_shapes(name):
    spec = get_model(name)
    layers = spec.build(SMALL_GPT, torch.float32, 0)
    assert len(layers) == 14
    assert isinstance(layers[0], Embedding) and isinstance(layers[-1], LMHead)
    assert all(isinstance(layer, DecoderBlock) for layer in layers[1:13])
    x, y = spec.sample_batch(3, SMALL_GPT, 0, torch.float32)
    assert x.shape == (3, 8) and y.shape == (3, 8) and x.dtype == torch.int64
    out = _run(layers, x)
    assert out.shape == (3, 8, 50)
    assert torch.isfinite(spec.loss(out, y))


def test_vgg16_has_16_layers_and_shapes():
    spec = get_model("vgg16")
    assert VGG16_CONFIG["width"] == 64 and VGG16_CONFIG["fc"] == 4096
    layers = spec.build(SMALL_VGG, torch.float32, 0)
    assert len(layers) == 16
    assert sum(isinstance(layer, ConvLayer) for layer in layers) == 13
    assert all(isinstance(layer, FCLayer) for layer in layers[13:])
    assert sum(layer.pool for layer in layers[:13]) == 5  # pools folded into convs 2,4,7,10,13
    assert [i for i, layer in enumerate(layers[:13]) if layer.pool] == [1, 3, 6, 9, 12]
    x, y = spec.sample_batch(2, SMALL_VGG, 0, torch.float32)
    assert x.shape == (2, 3, 32, 32) and y.shape == (2,)
    assert _run(layers, x).shape == (2, 7)


def test_mini_models_default_shapes():
    gpt = get_model("gpt1-mini")
    vgg = get_model("vgg16-mini")
    assert len(gpt.build(None, torch.float32, 0)) == 14
    assert len(vgg.build(None, torch.float32, 0)) == 16
    assert gpt.default_config["seq"] < GPT1_CONFIG["seq"]
    assert gpt.default_config["d_model"] < GPT1_CONFIG["d_model"]
    assert vgg.default_config["image"] < VGG16_CONFIG["image"]
    assert vgg.default_config["width"] < VGG16_CONFIG["width"]


def _independence(name, config, B=4):
    spec = get_model(name)
    layers = spec.build(config, torch.float64, 1)
    x, _ = spec.sample_batch(B, config, 2, torch.float64)
    x2, _ = spec.sample_batch(B, config, 3, torch.float64)
    x2[0] = x[0]  # same sample 0, different neighbours
    with torch.no_grad():
        a, b = _run(layers, x), _run(layers, x2)
    assert not torch.allclose(a[1:], b[1:])
    torch.testing.assert_close(a[0], b[0], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    ("name", "config"),
    [("gpt1", SMALL_GPT), ("vgg16", SMALL_VGG), ("tiny-known", None), ("gpt1-mini", None)],
)
def test_per_sample_independence_float64(name, config):
    _independence(name, config)


def test_gpt1_is_causal():
    spec = get_model("gpt1")
    layers = spec.build(SMALL_GPT, torch.float64, 0)
    x, _ = spec.sample_batch(2, SMALL_GPT, 0, torch.float64)
    x2 = x.clone()
    x2[:, 5:] = (x2[:, 5:] + 1) % SMALL_GPT["vocab"]
    with torch.no_grad():
        a, b = _run(layers, x), _run(layers, x2)
    torch.testing.assert_close(a[:, :5], b[:, :5], rtol=1e-12, atol=1e-12)
    assert not torch.allclose(a[:, 5:], b[:, 5:])


def test_loss_is_sum_of_per_sample_losses():
    for name, config in (("gpt1", SMALL_GPT), ("vgg16", SMALL_VGG), ("tiny-known", None)):
        spec = get_model(name)
        layers = spec.build(config, torch.float64, 0)
        x, y = spec.sample_batch(3, config, 0, torch.float64)
        with torch.no_grad():
            out = _run(layers, x)
            whole = spec.loss(out, y)
            parts = sum(spec.loss(out[i : i + 1], y[i : i + 1]) for i in range(3))
        torch.testing.assert_close(whole, parts, rtol=1e-12, atol=1e-12)


def test_seeded_build_is_deterministic():
    spec = get_model("vgg16")
    a = spec.build(SMALL_VGG, torch.float32, 5)
    b = spec.build(SMALL_VGG, torch.float32, 5)
    c = spec.build(SMALL_VGG, torch.float32, 6)
    pa, pb, pc = (torch.cat([p.flatten() for m in ls for p in m.parameters()]) for ls in (a, b, c))
    assert torch.equal(pa, pb) and not torch.equal(pa, pc)


def test_tiny_known_work_is_the_number_of_matmuls():
    spec = get_model("tiny-known")
    layers = spec.build({"work": [1, 3], "hidden": 8, "rows": 2}, torch.float64, 0)
    assert [layer.work for layer in layers] == [1, 3]
    assert all(isinstance(layer, RepeatedMatmul) for layer in layers)
    x = torch.randn(2, 2, 8, dtype=torch.float64)
    w = layers[1].weight.detach()
    torch.testing.assert_close(layers[1](x), x @ w @ w @ w)


@pytest.mark.parametrize(
    ("name", "config", "match"),
    [
        ("gpt1", {"sq": 3}, "unknown field 'sq'"),
        ("gpt1", {"seq": 0}, "field 'seq'"),
        ("gpt1", {"d_model": 30, "heads": 4}, "divisible"),
        ("vgg16", {"image": 40}, "field 'image' must be a multiple of 32"),
        ("vgg16-mini", {"width": -1}, "field 'width'"),
        ("tiny-known", {"work": []}, "field 'work'"),
    ],
)
def test_config_errors_name_the_field(name, config, match):
    with pytest.raises(ValueError, match=match):
        get_model(name).build(config, torch.float32, 0)


def test_vgg16_hr_is_vgg16_at_high_resolution_narrow_width():
    """The issue-14 workload: VGG16's 16 layers at 128 px, width 16, the 4096-wide classifier."""
    spec = get_model("vgg16-hr")
    assert spec.default_config == {"image": 128, "width": 16, "fc": 4096, "classes": 1000}
    layers = spec.build(None, torch.float32, 0)
    assert len(layers) == 16
    assert layers[0].conv.out_channels == 16
    assert layers[13].fc.in_features == 8 * 16 * 4 * 4  # 8 * width * (image / 32) ** 2
    assert layers[14].fc.weight.shape == (4096, 4096)
    x, y = spec.sample_batch(2, None, 0, torch.float32)
    assert x.shape == (2, 3, 128, 128) and y.shape == (2,)
    # vgg16 itself is unchanged
    assert get_model("vgg16").default_config == VGG16_CONFIG


def test_vgg16_stem_is_vgg16s_first_blocks_and_classifier():
    """The issue-14 workload: VGG16's first 4 convs at 128 px, width 32, then its classifier on
    the features pooled to the (image / 32)-sided grid."""
    spec = get_model("vgg16-stem")
    assert spec.default_config == {"image": 128, "width": 32, "convs": 4, "fc": 4096,
                                   "classes": 1000}
    small = {"image": 64, "width": 4, "convs": 4, "fc": 16, "classes": 5}
    layers = spec.build(small, torch.float32, 0)
    assert len(layers) == 7
    assert [type(layer).__name__ for layer in layers[:4]] == ["ConvLayer"] * 4
    assert layers[4].fc.in_features == 8 * 2 * 2  # 2 * width channels on a 2 x 2 grid
    assert layers[4].k == 8  # 16 x 16 after the first two blocks, pooled to 2 x 2
    x, _ = spec.sample_batch(3, small, 0, torch.float32)
    assert _run(layers, x).shape == (3, 5)
    _independence("vgg16-stem", small)
    with pytest.raises(UserInputError, match="convs"):
        spec.build({"convs": 14}, torch.float32, 0)
