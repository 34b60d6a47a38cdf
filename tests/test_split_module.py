"""Models beyond nn.Sequential (issue 44, item 2): any nn.Module split by torch's own
pipeline() at named submodules, or a plain list of stage modules; sync training bitwise
equal to plain autograd with gradient accumulation."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from pipemare_lite.training.datasets import microbatches
from pipemare_lite.training.loop import fit
from pipemare_lite.training.partition import partition
from pipemare_lite.training.split_module import SplitError
from tests.fixtures.residual import Block
from tests.references import gradient_accumulation

pytestmark = pytest.mark.usefixtures("one_thread")  # bitwise comparisons: conftest.py


class ResidualNet(nn.Module):
    """Skips inside each block and across the cuts: ``h`` travels from the first stage to
    the last past the middle one, and block2's input is added back after block3."""

    def __init__(self, width: int = 12, seed: int = 0) -> None:
        super().__init__()
        torch.manual_seed(seed)
        self.embed = nn.Linear(5, width)
        self.block1, self.block2, self.block3 = Block(width), Block(width), Block(width)
        self.head = nn.Linear(width, 1)

    def forward(self, x):
        h = self.embed(x)
        z = self.block1(h)
        z = self.block3(self.block2(z)) + z
        return self.head(z + h)


class DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.linear = nn.Linear(5, 5)

    def forward(self, x):
        return self.linear(x) if x.sum() > 0 else x


class Untraceable(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.first = nn.Linear(5, 5)
        self.inner = nn.Sequential(nn.Linear(5, 5), DataDependent())
        self.last = nn.Linear(5, 1)

    def forward(self, x):
        return self.last(self.inner(self.first(x)))


CUTS = ["block2", "block3"]


def _data(num=64):
    generator = torch.Generator().manual_seed(1)
    x = torch.randn(num, 5, generator=generator)
    return x, torch.sin(x).sum(1, keepdim=True)


def test_torch_splits_a_residual_network_into_stages_that_share_its_parameters():
    model = ResidualNet()
    x, _ = _data()
    stages = partition(model, 3, balance=CUTS, sample=x[:4])
    assert len(stages) == 3
    model_params = {id(p) for p in model.parameters()}
    stage_params = [id(p) for s in stages for p in s.parameters()]
    assert sorted(stage_params) == sorted(model_params)  # every parameter once, shared
    out = x[:10]  # another batch size than the traced sample
    for stage in stages:
        out = stage(out)
    assert torch.equal(out, model(x[:10]))
    # h crosses both cuts (packed with the block outputs), z the second
    assert stages[0].send_shapes == ((12,), (12,))
    assert stages[1].send_shapes == ((12,), (12,), (12,))
    # the model's own forwards are as they were before the split
    assert all("_orig_forward" not in m.__dict__ for m in model.modules())


@pytest.mark.parametrize("method", ["gpipe", "1f1b"])
def test_sync_training_of_a_split_module_equals_gradient_accumulation(method):
    x, y = _data()
    loader = DataLoader(TensorDataset(x, y), batch_size=16)
    model, reference = ResidualNet(), ResidualNet()
    history = fit(model, loader, method=method, num_stages=3, num_microbatches=4, epochs=2,
                  lr=0.05, loss_fn=F.mse_loss, balance=CUTS, progress=False)
    steps = [microbatches(xb, yb, 4) for xb, yb in loader] * 2
    flat = [mb for step in steps for mb in step]
    optimizer = torch.optim.SGD(reference.parameters(), lr=0.05)
    losses = gradient_accumulation(reference, optimizer, F.mse_loss, flat, 4, len(steps))
    assert all(torch.equal(p, q) for p, q in zip(model.parameters(), reference.parameters()))
    assert history.loss == pytest.approx(
        [sum(losses[k * 4:(k + 1) * 4]) / 4 for k in range(len(steps))], rel=1e-12, abs=0)
    assert history.config["balance"] == CUTS


def test_a_plain_list_of_stage_modules_is_one_stage_each():
    torch.manual_seed(0)
    first, second = nn.Sequential(nn.Linear(5, 8), nn.Tanh()), nn.Linear(8, 1)
    stages = partition([first, second], 2)
    assert [list(s.children()) for s in stages] == [[first], [second]]
    x, y = _data()
    reference = [nn.Sequential(nn.Linear(5, 8), nn.Tanh()), nn.Linear(8, 1)]
    for mine, ref in zip((first, second), reference):
        ref.load_state_dict(mine.state_dict())
    fit([first, second], DataLoader(TensorDataset(x, y), batch_size=16), method="gpipe",
        num_stages=2, num_microbatches=2, epochs=1, lr=0.1, loss_fn=F.mse_loss, progress=False)
    plain = nn.Sequential(*reference)
    steps = [microbatches(xb, yb, 2) for xb, yb in DataLoader(TensorDataset(x, y), 16)]
    gradient_accumulation(plain, torch.optim.SGD(plain.parameters(), lr=0.1), F.mse_loss,
                          [mb for s in steps for mb in s], 2, len(steps))
    assert torch.equal(second.weight, plain[1].weight)


def test_a_failed_trace_names_the_submodule():
    with pytest.raises(SplitError, match="failed in submodule 'inner.1'.*data-dependent"):
        partition(Untraceable(), 2, balance=["last"], sample=torch.randn(2, 5))


def test_bad_split_points_are_refused_naming_the_choices():
    model, sample = ResidualNet(), torch.randn(2, 5)
    with pytest.raises(SplitError, match="'block9' is no submodule .* embed, block1, block2"):
        partition(model, 2, balance=["block9"], sample=sample)
    with pytest.raises(SplitError, match="3 stages need 2 split points .* got 1"):
        partition(model, 3, balance=["block2"], sample=sample)
    # one point in the singular, and fit's keyword named
    with pytest.raises(SplitError, match=r"2 stages need 1 split point \(the submodule where "
                                         r"stage 1 begins: fit's balance=\[\.\.\.\]\), got 0"):
        partition(model, 2, balance=[], sample=sample)
    # a nested name: the message shows how one reads and suggests the close one
    with pytest.raises(SplitError) as error:
        partition(model, 2, balance=["block1.a."], sample=sample)
    assert "(a submodule inside one is named with dots, e.g. 'block1.a')" in str(error.value)
    assert "Did you mean 'block1.a'" in str(error.value)
    with pytest.raises(SplitError, match="needs a sample input tensor"):
        partition(model, 2, balance=["block2"])
    assert partition(model, 1) == [model]


def test_pipedream_on_a_split_module_is_delayed_sgd_at_the_stashed_weights():
    from pipemare_lite.engine.local import LocalExecutor
    from pipemare_lite.schedules.registry import build_schedule
    from tests.references import stashed_weights_sgd

    x, y = _data(32)
    mbs = microbatches(x, y, 8)
    schedule = build_schedule("pipedream", 3, 2, num_minibatches=4)

    def factory(params):
        return torch.optim.SGD(params, lr=0.05)

    want_losses, want_states = stashed_weights_sgd(
        schedule, partition(ResidualNet(), 3, balance=CUTS, sample=x[:4]), mbs,
        F.mse_loss, factory)
    stages = partition(ResidualNet(), 3, balance=CUTS, sample=x[:4])
    result = LocalExecutor(schedule, stages, loss_fn=F.mse_loss,
                           optimizer_factory=factory).run(mbs)
    assert result.losses == want_losses
    for stage, state in zip(stages, want_states):
        for name, p in stage.named_parameters():
            assert torch.equal(p.detach(), state[name]), name
