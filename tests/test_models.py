"""Models: shapes, seeded init, batch-independence of normalisation, independent references."""

import pytest
import torch
from torch import nn

from pipemare_lite.training.models import MODELS, SelfAttention, mlp, small_resnet, tiny_transformer


def _params_equal(a: nn.Module, b: nn.Module) -> bool:
    return all(torch.equal(p, q) for p, q in zip(a.parameters(), b.parameters(), strict=True))


def _build(name, seed):
    return mlp(64, 8, 3, 10, seed=seed) if name == "mlp" else MODELS[name](seed=seed)


@pytest.mark.parametrize("name", list(MODELS))
def test_seeded_init_is_deterministic_and_leaves_global_rng_alone(name):
    torch.manual_seed(123)
    before = torch.get_rng_state()
    a = _build(name, 7)
    assert torch.equal(torch.get_rng_state(), before)
    assert _params_equal(a, _build(name, 7))
    assert not _params_equal(a, _build(name, 8))


def test_mlp_shapes_children_and_manual_reference():
    model = mlp(64, 16, 4, 10, seed=0)
    assert isinstance(model, nn.Sequential) and len(model) == 4
    x = torch.randn(5, 1, 8, 8)
    out = model(x)
    assert out.shape == (5, 10)
    # independent reference: the same weights applied with plain matrix products
    linears = [m for m in model.modules() if isinstance(m, nn.Linear)]
    h = x.reshape(5, 64)
    for i, lin in enumerate(linears):
        h = h @ lin.weight.T + lin.bias
        if i < len(linears) - 1:
            h = torch.clamp(h, min=0)
    torch.testing.assert_close(out, h)


def test_mlp_depth_one_is_a_linear_classifier():
    model = mlp(40, 99, 1, 3)
    assert len(model) == 1 and model(torch.randn(2, 40)).shape == (2, 3)


def test_resnet_shapes_and_flat_input():
    model = small_resnet(channels=8, blocks=3, num_classes=10, in_channels=1, image_size=8)
    assert len(model) == 5  # stem + 3 blocks + head
    x = torch.randn(4, 1, 8, 8)
    assert model(x).shape == (4, 10)
    torch.testing.assert_close(model(x.reshape(4, 64)), model(x))
    assert not any(isinstance(m, nn.modules.batchnorm._BatchNorm) for m in model.modules())


@pytest.mark.parametrize("builder", [small_resnet, tiny_transformer])
def test_output_does_not_depend_on_how_the_batch_is_cut(builder):
    # GroupNorm / LayerNorm are per sample: microbatching must not change any output
    model = builder(seed=1)
    x = torch.randint(0, 16, (8, 8)) if builder is tiny_transformer else torch.randn(8, 1, 8, 8)
    whole = model(x)
    pieces = torch.cat([model(x[:3]), model(x[3:5]), model(x[5:])])
    torch.testing.assert_close(whole, pieces, rtol=1e-5, atol=1e-6)


def test_transformer_shapes():
    model = tiny_transformer(vocab=12, d_model=16, heads=4, layers=3, seq_len=6)
    assert len(model) == 5
    tokens = torch.randint(0, 12, (2, 6))
    assert model(tokens).shape == (2, 6, 12)
    with pytest.raises(ValueError, match="exceeds seq_len"):
        model(torch.randint(0, 12, (2, 7)))


def test_attention_matches_torch_scaled_dot_product_attention():
    torch.manual_seed(0)
    attn = SelfAttention(d_model=12, heads=3)
    x = torch.randn(2, 5, 12)
    q, k, v = attn.qkv(x).split(12, dim=-1)
    q, k, v = (t.view(2, 5, 3, 4).transpose(1, 2) for t in (q, k, v))
    ref = torch.nn.functional.scaled_dot_product_attention(q, k, v)
    ref = attn.out(ref.transpose(1, 2).reshape(2, 5, 12))
    torch.testing.assert_close(attn(x), ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize(
    "call, message",
    [
        (lambda: mlp(64, 8, 0, 10), "depth"),
        (lambda: small_resnet(channels=-1), "channels"),
        (lambda: tiny_transformer(d_model=10, heads=3), "divisible"),
    ],
)
def test_bad_arguments_are_named(call, message):
    with pytest.raises(ValueError, match=message):
        call()
