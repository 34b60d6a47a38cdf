"""Harnesses: how to run an answer that is not simply called on a case (introduced in chapter 05).

Most exercises call the student's function on a case's arguments and compare what it
returns. Some answers are tools, not values: ex05_1's ``version_hooks(params, weights)``
returns a pair of saved-tensor hooks, and what matters is the gradients a backward computes
under them. Such an exercise names a harness (``Exercise.harness``, a dotted name of a
function here): ``harness(answer, *case_values)`` builds the situation the case describes,
uses the answer in it and returns a plain value (lists of floats), which is compared with
the reference like any answer.

A harness runs wherever the answer runs: in the notebook's process for ``check()``, and in
the grading worker (:mod:`~pipemare_lite.book.exercises.worker`), which is why this module holds
no reference answers and imports nothing of the exercise definitions. What a harness builds
is seeded, so the grader's reference and the worker's run see the same tensors.
``t2_on_tensors`` feeds ex09_1's T2 step a stage's updates one by one. Torch-free at import
(a harness imports torch when it runs).
"""

from __future__ import annotations

#: The stage modules ex05_1 is checked on: what each saves for its backward differs (Linear
#: saves a transposed view of its weight; Conv2d and LayerNorm the parameter itself).
HOOK_MODELS = ("linear", "mlp", "linear+layernorm", "conv")


#: The seed of ex05_1's fixed cases (the drawn ones carry their own).
HOOK_SEED = 5


def hook_stage(model: str, seed: int = HOOK_SEED):
    """``(module, x, grad_y, delta)`` for one ex05_1 case.

    A middle stage (its input needs a gradient), the gradient arriving from the next stage,
    and the update that will change the parameters in place while the backward is pending.
    Drawn from ``seed`` (a case's own: the grader's cases carry seeds students never see),
    float64.

    Raises:
        ValueError: ``model`` is not one of :data:`HOOK_MODELS`.
    """
    import torch
    from torch import nn

    layers = {
        "linear": lambda: nn.Linear(5, 4),
        "mlp": lambda: nn.Sequential(nn.Linear(5, 6), nn.ReLU(), nn.Linear(6, 4)),
        "linear+layernorm": lambda: nn.Sequential(nn.Linear(5, 4), nn.LayerNorm(4)),
        "conv": lambda: nn.Sequential(nn.Conv2d(2, 3, 3, padding=1), nn.Tanh()),
    }
    if model not in layers:
        raise ValueError(f"unknown model {model!r}; allowed: {', '.join(HOOK_MODELS)}")
    torch.manual_seed(seed)
    module = layers[model]().double()
    shape = (3, 2, 4, 4) if model == "conv" else (3, 5)
    x = torch.randn(*shape, dtype=torch.float64)
    with torch.no_grad():
        grad_y = torch.randn_like(module(x))
    delta = [0.5 * torch.randn_like(p) for p in module.parameters()]
    return module, x, grad_y, delta


def plain_gradients(grad_x, grads) -> tuple:
    """``(input gradient, [parameter gradients])`` as nested lists of floats (None kept)."""
    as_list = lambda t: None if t is None else t.detach().tolist()  # noqa: E731
    return as_list(grad_x), [as_list(g) for g in grads]


def gradients_with_hooks(version_hooks, model: str, backward_reads: str,
                         seed: int = HOOK_SEED) -> tuple:
    """ex05_1: a stage's F, an update, then B, with ``version_hooks`` around the forward.

    ``version_hooks(params, weights)`` gets the stage's parameters and the weights its
    backward must read: a copy taken at F (``backward_reads="stash"``) or the live
    parameters (``"live"``), which the update changes in place before the backward runs.
    ``seed`` draws the stage (:func:`hook_stage`). Returns :func:`plain_gradients` of the
    input and of every parameter.

    Raises:
        ValueError: ``backward_reads`` is neither ``"stash"`` nor ``"live"``, or ``model`` is
            unknown.
    """
    import torch

    if backward_reads not in ("stash", "live"):
        raise ValueError(f"backward_reads must be 'stash' or 'live', got {backward_reads!r}")
    module, x, grad_y, delta = hook_stage(model, seed)
    params = list(module.parameters())
    if backward_reads == "stash":
        weights = [p.detach().clone() for p in params]  # the copy taken at F
    else:
        weights = [p.detach() for p in params]  # the live weights: they will change
    pack, unpack = version_hooks(params, weights)
    x.requires_grad_(True)
    with torch.autograd.graph.saved_tensors_hooks(pack, unpack):
        y = module(x)
    with torch.no_grad():  # an update arrives while this microbatch's backward is pending
        for p, d in zip(params, delta):
            p.add_(d)
    y.backward(grad_y)
    return plain_gradients(x.grad, [p.grad for p in params])


# --- ex09: T2 on real tensors ----------------------------------------------------------------

#: The parameter shapes ex09_1 is checked on: a Linear layer, a two-layer MLP, a Conv2d.
T2_MODELS = {
    "linear": [(4, 5), (4,)],
    "mlp": [(6, 5), (6,), (4, 6), (4,)],
    "conv": [(3, 2, 3, 3), (3,)],
}


def t2_sequence(model: str, updates: int):
    """``(weights, changes)`` for one ex09_1 case: a stage's initial parameters and the change
    each of ``updates`` optimizer steps makes to them (seeded, float64).

    Raises:
        ValueError: ``model`` is not one of :data:`T2_MODELS`.
    """
    import torch

    if model not in T2_MODELS:
        raise ValueError(f"unknown model {model!r}; allowed: {', '.join(T2_MODELS)}")
    generator = torch.Generator().manual_seed(9)
    weights = [torch.randn(*shape, generator=generator, dtype=torch.float64)
               for shape in T2_MODELS[model]]
    # steps that drift in one direction with noise around it, like SGD's
    drift = [0.05 * torch.randn(*shape, generator=generator, dtype=torch.float64)
             for shape in T2_MODELS[model]]
    changes = [[d + 0.02 * torch.randn(*d.shape, generator=generator, dtype=torch.float64)
                for d in drift] for _ in range(updates)]
    return weights, changes


def t2_on_tensors(t2_step, model: str, gamma: float, distances: list[int]) -> list:
    """ex09_1: a stage's updates one by one, each followed by a backward ``distances[k]``
    updates after its forward, with the student's ``t2_step`` keeping T2's state.

    ``t2_step(delta, w_old, w_new, gamma, distance)`` gets T2's buffer before the update (one
    tensor per parameter, zeros at first), the weights before and after it, and returns
    ``(new_delta, backward_weights)``. Returns, per update, ``[new_delta, backward_weights]``
    as nested lists of floats.
    """
    import torch

    weights, changes = t2_sequence(model, len(distances))
    delta = [torch.zeros_like(w) for w in weights]
    steps = []
    for change, distance in zip(changes, distances):
        new = [w + c for w, c in zip(weights, change)]
        delta, backward = t2_step([d.clone() for d in delta], [w.clone() for w in weights],
                                  [w.clone() for w in new], gamma, distance)
        delta = [torch.as_tensor(d, dtype=torch.float64) for d in delta]
        steps.append([[d.tolist() for d in delta],
                      [torch.as_tensor(b).tolist() for b in backward]])
        weights = new
    return steps
