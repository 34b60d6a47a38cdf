"""Split any ``nn.Module`` into pipeline stages with PyTorch's own splitter (introduced in
chapter 01; issue 44).

An ``nn.Sequential`` is cut between its children
(:func:`pipemare_lite.training.partition.partition`); any other module is traced by
``torch.distributed.pipelining.pipeline()`` (which captures the forward with
``torch.export``) and cut where the split points say, e.g. ``["layer3"]``: stage 1 begins
at ``layer3`` (torch's ``SplitPoint.BEGINNING``; a ``{name: SplitPoint}`` dict chooses
``END`` too). The stages hold the model's own parameters (shared, not copied), so training
the stages trains the model.

Between stages the engine hands over one tensor. A cut that a skip connection crosses
makes a stage return several tensors (the block's output and the skip), so
:class:`PackedStage` packs them into one ``(batch, features)`` tensor and the next stage
unpacks it::

    stage 0: x -> inp -> b1 ------> (b1, inp)  --pack-->  [b1 | inp]   one tensor
    stage 1: [b1 | inp] --unpack--> b2(b1) + inp -> out

Packing is a reshape and a concatenation (exact copies), so the numbers are those of the
unsplit model; it needs every tensor crossing a cut to have the batch dimension first and
one floating dtype. What ``torch.export`` cannot capture (data-dependent control flow, ...)
is refused by :class:`SplitError` naming the submodule where tracing failed.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import torch
from torch import nn

from pipemare_lite.spelling import did_you_mean
from pipemare_lite.torch_compat import torch_pytree_warning_ignored


class SplitError(ValueError):
    """torch's splitter could not cut the model; the message names the submodule."""


def _failing_module(model: nn.Module, error: BaseException) -> str | None:
    """The deepest submodule of ``model`` whose ``forward`` is on the failing traceback."""
    names = {id(module): name or type(model).__name__ for name, module in
             model.named_modules()}
    deepest, exc, seen = None, error, set()
    while exc is not None and id(exc) not in seen:
        seen.add(id(exc))
        tb = exc.__traceback__
        while tb is not None:
            owner = tb.tb_frame.f_locals.get("self")
            if id(owner) in names and isinstance(owner, nn.Module):
                deepest = names[id(owner)]
            tb = tb.tb_next
        exc = exc.__cause__ or exc.__context__
    return deepest


def _split_spec(model: nn.Module, num_stages: int, split_points) -> dict:
    """``{qualified name: SplitPoint}`` from a list of names (stage begins there) or a dict,
    checked against the model's submodules and the stage count."""
    from torch.distributed.pipelining import SplitPoint

    if isinstance(split_points, Mapping):
        spec = dict(split_points)
    elif isinstance(split_points, Sequence) and not isinstance(split_points, str):
        spec = {name: SplitPoint.BEGINNING for name in split_points}
    else:
        raise SplitError(f"split points must be a list of submodule names or a dict "
                         f"{{name: SplitPoint}}, got {split_points!r}")
    known = dict(model.named_modules())
    children = ", ".join(name for name, _ in model.named_children()) or "none"
    nested = next((name for name in known if "." in name), None)
    if nested is not None:  # a stage may begin inside a child: say how such a name reads
        children += f" (a submodule inside one is named with dots, e.g. {nested!r})"
    for name, point in spec.items():
        if not isinstance(name, str) or not name or name not in known:
            raise SplitError(f"split point {name!r} is no submodule of {type(model).__name__}; "
                             f"its children: {children}."
                             + did_you_mean(name, [n for n in known if n]))
        if not isinstance(point, SplitPoint):
            raise SplitError(f"split point {name!r}: {point!r} is no "
                             "torch.distributed.pipelining.SplitPoint (BEGINNING or END)")
    if len(spec) != num_stages - 1:
        need = num_stages - 1
        which = ("1 split point (the submodule where stage 1 begins" if need == 1 else
                 f"{need} split points (the submodules where stages 1..{need} begin")
        raise SplitError(f"{num_stages} stages need {which}: fit's balance=[...]), got "
                         f"{len(spec)}: {list(spec)}; {type(model).__name__}'s children: "
                         f"{children}")
    return spec


def _restore_forwards(model: nn.Module, names) -> None:
    """Undo the forward wrappers torch's ``annotate_split_points`` leaves on the model."""
    for name in names:
        module = model.get_submodule(name)
        if "_orig_forward" in module.__dict__:
            module.__dict__.pop("forward", None)
            del module.__dict__["_orig_forward"]


def _as_tuple(value) -> tuple:
    return tuple(value) if isinstance(value, (tuple, list)) else (value,)


def _interface(values: tuple, batch: int, where: str) -> tuple | None:
    """Per-sample shapes of the tensors crossing one cut, or None for a single tensor."""
    if len(values) == 1 and isinstance(values[0], torch.Tensor):
        return None
    dtypes = {getattr(v, "dtype", None) for v in values}
    for v in values:
        if not isinstance(v, torch.Tensor) or v.dim() == 0 or v.shape[0] != batch:
            described = tuple(v.shape) if isinstance(v, torch.Tensor) else type(v).__name__
            raise SplitError(f"{where}: a value crossing the cut is {described}; packing "
                             f"several values into one message needs tensors with the batch "
                             f"({batch}) first")
    if len(dtypes) != 1 or not next(iter(dtypes)).is_floating_point:
        raise SplitError(f"{where}: the tensors crossing the cut have dtypes "
                         f"{sorted(map(str, dtypes))}; packing needs one floating dtype (move "
                         "the cut so that fewer tensors cross it)")
    return tuple(tuple(v.shape[1:]) for v in values)


def _pack(values: tuple) -> torch.Tensor:
    return torch.cat([v.reshape(v.shape[0], -1) for v in values], dim=1)


def _unpack(x: torch.Tensor, shapes: tuple) -> tuple:
    sizes = [math.prod(shape) for shape in shapes]
    parts = torch.split(x, sizes, dim=1)
    return tuple(p.reshape(x.shape[0], *shape) for p, shape in zip(parts, shapes))


class PackedStage(nn.Module):
    """One stage of a traced split with a one-tensor interface (see the module's picture).

    It unpacks its input into the values that cross the cut before it (``receives``, by
    name), runs the traced stage on those it takes (``takes``), names what it returns
    (``returns``: one name, or one per returned value, None for an unused one) and packs the
    values that later stages need (``sends``: passed on or its own). ``shapes``:
    per-sample shapes of what it receives (None: a single tensor, not packed), and
    ``send_shapes`` likewise of what it sends.
    """

    def __init__(self, module: nn.Module, receives: tuple, takes: tuple, returns,
                 sends: tuple, shapes: tuple | None = None,
                 send_shapes: tuple | None = None) -> None:
        super().__init__()
        self.module = module
        self.receives, self.takes, self.returns, self.sends = receives, takes, returns, sends
        self.shapes, self.send_shapes = shapes, send_shapes

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """Unpack, run the traced stage, pack."""
        sent = self.sent_values(x)
        return _pack(sent) if self.send_shapes is not None else sent[0]

    def sent_values(self, x: torch.Tensor) -> tuple:
        """What the stage sends on input ``x``, before packing."""
        values = dict(zip(self.receives, _unpack(x, self.shapes) if self.shapes else (x,)))
        out = self.module(*(values[name] for name in self.takes))
        if isinstance(self.returns, str):
            values[self.returns] = out
        else:
            values.update((name, v) for name, v in zip(self.returns, out) if name)
        return tuple(values[name] for name in self.sends)


def _wiring(pipe, num_stages: int) -> list[dict]:
    """From torch's root graph (``pipe.split_gm``): for each stage, the names of what it
    receives, takes, returns and sends; a value travels through every stage between the
    one that makes it and the one that uses it (the engine links neighbours only)."""
    import operator

    graph = pipe.split_gm.graph
    placeholders = [n for n in graph.nodes if n.op == "placeholder"]
    calls = [n for n in graph.nodes if n.op == "call_module"]
    if len(placeholders) != 1 or len(calls) != num_stages or any(c.kwargs for c in calls):
        raise SplitError(f"torch's split has {len(placeholders)} inputs and {len(calls)} "
                         f"stage calls; the engine runs one input through {num_stages} stages")
    made_by = {placeholders[0].name: -1}
    returns = []
    for i, call in enumerate(calls):
        items = {u.args[1]: u.name for u in call.users
                 if u.op == "call_function" and u.target is operator.getitem}
        if items:
            returns.append(tuple(items.get(k) for k in range(max(items) + 1)))
            made_by.update((name, i) for name in items.values())
        else:
            returns.append(call.name)
            made_by[call.name] = i
    output = next(n for n in graph.nodes if n.op == "output").args[0]
    final = output[0] if isinstance(output, (tuple, list)) and len(output) == 1 else output
    if isinstance(final, (tuple, list)):
        raise SplitError(f"the model returns {len(final)} values; the loss takes one tensor")
    uses = [tuple(a.name for a in call.args) for call in calls] + [(final.name,)]
    order = list(made_by)  # graph order: packing is deterministic
    wiring, receives = [], (placeholders[0].name,)
    for i in range(num_stages):
        later = {name for used in uses[i + 1:] for name in used if made_by[name] <= i}
        sends = tuple(name for name in order if name in later)
        wiring.append({"receives": receives, "takes": uses[i], "returns": returns[i],
                       "sends": sends})
        receives = sends
    return wiring


def split_module(model: nn.Module, num_stages: int, split_points, sample: torch.Tensor
                 ) -> list[nn.Module]:
    """Cut ``model`` into ``num_stages`` stages with ``torch.distributed.pipelining.pipeline``.

    ``split_points``: the names of the submodules where stages 1..P-1 begin, or
    ``{name: SplitPoint}``; ``sample``: one input microbatch (traced, then run once through
    the stages to learn what crosses each cut). Returns one module per stage, taking and
    returning one tensor (:class:`PackedStage` where several cross a cut).
    """
    from torch.distributed.pipelining import pipeline

    if not isinstance(sample, torch.Tensor):
        raise SplitError(f"splitting a {type(model).__name__} needs a sample input tensor "
                         f"(one microbatch; fit() passes its first), got {type(sample).__name__}")
    spec = _split_spec(model, num_stages, split_points)
    try:
        with torch_pytree_warning_ignored():  # torch's own deprecation, not the user's
            pipe = pipeline(model, (sample,), split_spec=spec)
    except Exception as exc:  # torch raises RuntimeError around export's many error types
        where = _failing_module(model, exc)
        cause = exc.__cause__ or exc
        detail = (str(cause).strip().splitlines() or [type(cause).__name__])[0][:300]
        raise SplitError(
            f"torch.export could not trace {type(model).__name__}"
            + (f": it failed in submodule {where!r}" if where else "")
            + f" ({type(cause).__name__}: {detail}); make that forward traceable (no "
            "data-dependent Python control flow), or pass partition() a list of stage "
            "modules") from exc
    finally:
        _restore_forwards(model, spec)
    if pipe.num_stages != num_stages:
        raise SplitError(f"the split points {list(spec)} gave {pipe.num_stages} stages, not "
                         f"{num_stages}: a split point outside the traced forward is ignored")
    stages, x = [], sample
    with torch.no_grad():  # run the sample through to learn what crosses each cut
        for i, wires in enumerate(_wiring(pipe, num_stages)):
            shapes = stages[-1].send_shapes if stages else None
            stage = PackedStage(pipe.get_stage_module(i), shapes=shapes, **wires)
            if i < num_stages - 1:
                stage.send_shapes = _interface(
                    stage.sent_values(x), len(sample),
                    f"the cut after stage {i} of {type(model).__name__}")
            stages.append(stage)
            x = stage(x)
    return stages
