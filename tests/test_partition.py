"""partition(): contiguous, complete, bitwise-faithful stage splits; balance modes; errors."""

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from torch import nn

from pipemare_lite.training.models import mlp, small_resnet, tiny_transformer
from pipemare_lite.training.partition import balance_by_cost, even_balance, partition


def _run(stages, x):
    for stage in stages:
        x = stage(x)
    return x


@pytest.mark.parametrize(
    "model, x",
    [
        (mlp(64, 16, 6, 10), torch.randn(4, 64)),
        (small_resnet(channels=8, blocks=4), torch.randn(4, 1, 8, 8)),
        (tiny_transformer(layers=3), torch.randint(0, 16, (4, 8))),
    ],
)
def test_concatenated_stages_reproduce_the_model_bitwise(model, x):
    torch.set_num_threads(1)
    expected = model(x)
    for num_stages in range(1, len(model) + 1):
        for balance in (None, "params"):
            stages = partition(model, num_stages, balance=balance)
            assert torch.equal(_run(stages, x), expected)


def test_one_layer_per_stage_shares_modules_and_keeps_names():
    model = small_resnet(blocks=6)
    stages = partition(model, len(model))
    assert [len(s) for s in stages] == [1] * len(model)
    for stage, (name, layer) in zip(stages, model.named_children()):
        assert list(stage.named_children()) == [(name, layer)]  # same object: no copy


@settings(max_examples=60, deadline=None)
@given(
    counts=st.lists(st.integers(1, 3), min_size=1, max_size=8),
    data=st.data(),
)
def test_every_layer_exactly_once_in_order(counts, data):
    layers = [nn.Linear(2, 2) for _ in range(sum(counts))]
    num_stages = data.draw(st.integers(1, len(layers)))
    for balance in (None, "params", counts if len(counts) == num_stages else None):
        stages = partition(layers, num_stages, balance=balance)
        flat = [m for s in stages for m in s]
        assert len(stages) == num_stages and all(len(s) >= 1 for s in stages)
        assert [id(m) for m in flat] == [id(m) for m in layers]
    explicit = partition(layers, len(counts), balance=counts)
    assert [len(s) for s in explicit] == counts


def _brute_force_best(costs, k):
    n = len(costs)
    best = float("inf")
    for cuts in itertools.combinations(range(1, n), k - 1):
        bounds = (0, *cuts, n)
        best = min(best, max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:])))
    return best


@settings(max_examples=100, deadline=None)
@given(costs=st.lists(st.integers(0, 50), min_size=1, max_size=9), data=st.data())
def test_balance_by_cost_is_optimal_against_brute_force(costs, data):
    k = data.draw(st.integers(1, len(costs)))
    counts = balance_by_cost(costs, k)
    assert len(counts) == k and sum(counts) == len(costs) and min(counts) >= 1
    bounds = [0, *itertools.accumulate(counts)]
    achieved = max(sum(costs[a:b]) for a, b in zip(bounds, bounds[1:]))
    assert achieved == _brute_force_best(costs, k)


def test_even_balance_and_params_balance_examples():
    assert even_balance(7, 3) == [3, 2, 2]
    big, small = nn.Linear(100, 100), nn.Linear(2, 2)
    stages = partition([big, small, small, small], 2, balance="params")
    assert [len(s) for s in stages] == [1, 3]


def test_time_balance_needs_a_sample_and_returns_a_valid_split():
    model = mlp(64, 32, 5, 10)
    with pytest.raises(ValueError, match="sample"):
        partition(model, 2, balance="time")
    stages = partition(model, 3, balance="time", sample=torch.randn(8, 64))
    assert sum(len(s) for s in stages) == 5 and len(stages) == 3


@pytest.mark.parametrize(
    "kwargs, message",
    [
        (dict(num_stages=6), "cannot split 5 layers into 6 stages"),
        (dict(num_stages=0), "positive integer"),
        (dict(num_stages=2, balance=[2, 2]), "sums to 4 but the model has 5 layers"),
        (dict(num_stages=2, balance=[5, 0]), "empty stage"),
        (dict(num_stages=2, balance=[1, 1, 3]), "3 entries for 2 stages"),
        (dict(num_stages=2, balance="flops"), "unknown balance mode 'flops'"),
        (dict(num_stages=2, balance=[1.5, 3.5]), r"whole layer counts; got \[1.5, 3.5\]"),
        (dict(num_stages=2, balance=[True, 4]), "whole layer counts"),
    ],
)
def test_clear_errors(kwargs, message):
    with pytest.raises(ValueError, match=message):
        partition(mlp(8, 8, 5, 2), **kwargs)


def test_any_other_module_is_one_stage_or_needs_split_points():
    layer = nn.Linear(2, 2)
    assert partition(layer, 1) == [layer]  # nothing to cut
    with pytest.raises(ValueError, match="2 stages need 1 split point .* got 0: .*children: none"):
        partition(layer, 2, sample=torch.randn(1, 2))  # torch's splitter: tests/test_split_module
    with pytest.raises(TypeError, match="nn.Module, an nn.Sequential or a list of modules"):
        partition(3, 1)
